// One rank of htp-tier-bench: its own device and pager over the node's one host copy.
#include "tier/tier_bench.hpp"

#include "common/pager_counters.hpp"

#include <htp/checksum.hpp>
#include <htp/device.hpp>
#include <htp/error.hpp>
#include <htp/pager.hpp>
#include <htp/shared_link.hpp>
#include <htp/shared_tier.hpp>
#include <htp/token_bucket.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

namespace htp::bench::tier {

namespace {
constexpr std::size_t slack = std::size_t{256} << 20;

/// The weights file, mapped read-only for the rank's life.
struct mapped_file {
  void* data = nullptr;
  std::size_t bytes = 0;
  explicit mapped_file(const std::string& path) {
    // open, fstat, mmap: the mapping outlives the descriptor.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw io_error("htp-tier-bench: cannot open " + path, path, errno);
    struct stat st {};
    ::fstat(fd, &st);
    bytes = static_cast<std::size_t>(st.st_size);
    data = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (data == MAP_FAILED) throw io_error("htp-tier-bench: cannot map " + path, path, errno);
  }
  ~mapped_file() { ::munmap(data, bytes); }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
};

std::size_t hbm_budget(const options& o) {
  const auto b = static_cast<std::size_t>(o.hbm_fraction * static_cast<double>(o.weight_bytes));
  return std::max(b, 3 * o.layer_bytes);
}

pager_config config_of(const options& o, const std::shared_ptr<shared_link>& link) {
  pager_config pc;
  pc.hbm_budget_bytes = hbm_budget(o);
  pc.slab_bytes = std::size_t{64} << 20;  // halved for a small budget: at least two slabs
  while (pc.slab_bytes > pc.hbm_budget_bytes / 2 && pc.slab_bytes > (std::size_t{1} << 20))
    pc.slab_bytes /= 2;
  pc.chunk_bytes = o.chunk_bytes;
  pc.host_budget_bytes = o.source == "private" ? o.weight_bytes + slack : 0;
  pc.h2d.upstream = link;
  pc.verify_page_ins = false;  // the bench checksums every page-in itself
  return pc;
}

/// Copies the weights file into the tier's entries (the rank that fills them), then drops the
/// file's pages from the page cache: the tier is the node's copy from now on.
void fill_from_file(const options& o, std::vector<shared_entry>& es) {
  const std::string path = o.dir + "/weights.bin";
  {
    const mapped_file file(path);
    auto* bytes = static_cast<const char*>(file.data);
    for (std::size_t i = 0; i < es.size(); ++i)
      std::copy_n(bytes + i * o.layer_bytes, es[i].bytes, static_cast<char*>(es[i].data));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

/// Registers every layer with the pager from where its host copy is; returns the handles. `file`
/// is mapped for the file and private sources.
std::vector<tensor_handle> register_layers(const options& o, pager& p, shared_tier& tier,
                                           std::unique_ptr<mapped_file>& file) {
  std::vector<tensor_handle> hs;
  const std::size_t n = layers_of(o);
  if (o.source == "tier") {
    std::vector<shared_entry_request> batch;
    for (std::size_t i = 0; i < n; ++i)
      batch.push_back({"layer." + std::to_string(i), bytes_of(o, i)});
    const auto entries =
        tier.publish(batch, [&](std::vector<shared_entry>& es) { fill_from_file(o, es); });
    p.add_host_region(tier.data(), tier.data_bytes(), host_region_kind::pageable);
    for (const auto& e : entries)
      hs.push_back(p.register_tensor_at(e.name, e.bytes, tensor_kind::weight, e.data));
    return hs;
  }
  file = std::make_unique<mapped_file>(o.dir + "/weights.bin");
  char* bytes = static_cast<char*>(file->data);
  if (o.source == "file")
    p.add_host_region(file->data, file->bytes, host_region_kind::pageable_read_only);
  for (std::size_t i = 0; i < n; ++i) {
    void* at = bytes + i * o.layer_bytes;
    const std::string name = "layer." + std::to_string(i);
    hs.push_back(o.source == "file"
                     ? p.register_tensor_at(name, bytes_of(o, i), tensor_kind::weight, at)
                     : p.register_tensor(name, bytes_of(o, i), tensor_kind::weight, at));
  }
  if (o.source == "private") file.reset();  // the pager holds its own copy now
  return hs;
}

/// One step: every layer acquired, checksummed on the device and released, in order. Returns the
/// layers whose checksum did not match.
std::size_t run_step(device& dev, pager& p, stream_ref s, const std::vector<tensor_handle>& hs,
                     const std::vector<std::uint64_t>& expected, std::uint64_t* words) {
  for (std::size_t i = 0; i < hs.size(); ++i) {
    const device_span span = p.acquire(hs[i], s);
    if (words != nullptr) dev.checksum_async(span.data, span.bytes, &words[i], s);
    p.release(hs[i], s);
  }
  dev.synchronize(s);
  std::size_t bad = 0;
  for (std::size_t i = 0; words != nullptr && i < hs.size(); ++i)
    bad += words[i] != expected[i] ? 1 : 0;
  return bad;
}

void note_file(const options& o, const char* what, int value) {
  std::ofstream(o.dir + "/rank-" + std::to_string(o.child) + "." + what) << value << "\n";
}

/// Waits until every rank has written its ready file (after its warm-up step), so the timed steps
/// of all ranks overlap and share the link as the bound assumes. @throws htp::logic_error after
/// the run's timeout.
void barrier(const options& o) {
  note_file(o, "ready", 1);
  const std::int64_t deadline =
      token_bucket::steady_clock_ns() + static_cast<std::int64_t>(o.timeout_s * 1e9);
  for (int r = 0; r < o.processes;) {
    struct stat st {};
    if (::stat((o.dir + "/rank-" + std::to_string(r) + ".ready").c_str(), &st) == 0) {
      ++r;
      continue;
    }
    if (token_bucket::steady_clock_ns() > deadline)
      throw logic_error("htp-tier-bench: rank " + std::to_string(r) + " never became ready");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a poll of the other processes
  }
}

nlohmann::json stream_layers(const options& o, device& dev, pager& p,
                             const std::vector<tensor_handle>& hs) {
  std::vector<std::uint64_t> expected;
  for (const auto& c : read_json(o.dir + "/checksums.json"))
    expected.push_back(c.get<std::uint64_t>());
  auto* words = static_cast<std::uint64_t*>(dev.allocate(memory_kind::pinned_host, 8 * hs.size()));
  std::uint64_t* checked = o.verify ? words : nullptr;
  const stream_ref s = dev.create_stream();
  std::size_t bad = run_step(dev, p, s, hs, expected, checked);  // warm-up
  barrier(o);
  const pager_metrics before = p.metrics();
  std::vector<double> ms;
  for (int step = 0; step < o.steps; ++step) {
    note_file(o, "progress", step + 1);
    const std::int64_t t0 = token_bucket::steady_clock_ns();
    bad += run_step(dev, p, s, hs, expected, checked);
    ms.push_back(static_cast<double>(token_bucket::steady_clock_ns() - t0) / 1e6);
  }
  const pager_metrics m = metrics_delta(p.metrics(), before);
  dev.destroy_stream(s);
  dev.deallocate(memory_kind::pinned_host, words, 8 * hs.size());
  nlohmann::json j{
      {"step_ms", ms},
      {"checksum_mismatches", bad},
      {"page_ins_checked", o.verify ? hs.size() * static_cast<std::size_t>(o.steps + 1) : 0}};
  add_pager_counters(j, m, {"page_ins", "page_in_bytes", "faults"});
  return j;
}
}  // namespace

int run_rank(const options& o) {
  device_options d = o.device;
  d.sim_memory_bytes =
      static_cast<std::size_t>(o.hbm_fraction * static_cast<double>(o.weight_bytes)) +
      3 * o.layer_bytes + slack;
  d.ordinal = o.child;
  if (!wants_sim(d.backend)) d.ordinal = o.child % std::max(1, cuda_device_count());
  auto dev = make_bench_device(d);
  auto tier = shared_tier::open(tier_config(o));
  std::shared_ptr<shared_link> link;
  if (o.shared_link_gbps > 0) {
    const auto rate = static_cast<std::uint64_t>(o.shared_link_gbps * 1e9);
    link = tier->link("h2d", rate, 4 * o.chunk_bytes);
  }
  std::unique_ptr<mapped_file> file;
  nlohmann::json j;
  {
    pager p(*dev, config_of(o, link));
    const auto hs = register_layers(o, p, *tier, file);
    j = stream_layers(o, *dev, p, hs);
    const process_memory mem = memory_of_self();
    j.update({{"rank", o.child},
              {"tier_slot", tier->slot()},
              {"created_tier", tier->created()},
              {"rss_bytes", mem.rss},
              {"pss_bytes", mem.pss},
              {"private_bytes", mem.private_bytes},
              {"shared_bytes", mem.shared_bytes},
              {"anonymous_bytes", mem.anonymous_bytes},
              {"link_bytes_total", link ? link->bytes_taken() : 0},
              {"sim_hbm_bytes", wants_sim(d.backend) ? hbm_budget(o) : 0}});
    for (const auto h : hs) p.unregister_tensor(h);
  }
  write_json(j, o.dir + "/rank-" + std::to_string(o.child) + ".json");
  return j["checksum_mismatches"].get<std::size_t>() == 0 ? 0 : 1;
}

}  // namespace htp::bench::tier
