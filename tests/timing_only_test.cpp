// The scale simulator: a timing-only sim device stores no bytes (memory is address space, copies
// move nothing), so runs far larger than this machine's RAM fit; and the pager above it makes
// exactly the decisions it makes over a sim device that stores every byte.
#include <htp/error.hpp>
#include <htp/node.hpp>
#include <htp/pager.hpp>
#include <htp/sim_device.hpp>

#include "pager_fixture.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace htp::test {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20, GiB = std::size_t{1} << 30;

/// Resident set size of this process now, bytes (/proc/self/statm).
std::size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4096;
}

TEST(timing_only, memory_is_address_space_only_and_the_capacity_limits_still_hold) {
  sim_config c;
  c.timing_only = true;
  c.device_memory_bytes = 40 * GiB;
  c.pinned_memory_bytes = 64 * GiB;
  auto dev = make_sim_device(c);
  EXPECT_TRUE(dev->properties().timing_only);
  EXPECT_NE(dev->properties().name.find("timing-only"), std::string::npos);
  const std::size_t rss0 = rss_bytes();
  void* hbm = dev->allocate(memory_kind::device, 40 * GiB);
  EXPECT_THROW(dev->allocate(memory_kind::device, 1), out_of_memory) << "the HBM capacity is real";
  void* host = dev->allocate(memory_kind::pinned_host, 60 * GiB);
  EXPECT_EQ(sim_pinned_bytes_in_use(*dev), 60 * GiB);
  auto* word = static_cast<std::uint32_t*>(dev->allocate(memory_kind::pinned_host, 4096));
  *word = 7;  // small pinned allocations are real memory (htp's completion words)
  stream s(*dev);
  dev->copy_async(hbm, host, 8 * GiB, copy_direction::host_to_device, s);
  dev->copy_async(host, hbm, 8 * GiB, copy_direction::device_to_host, s);
  std::uint64_t sum = 1;
  dev->checksum_async(hbm, GiB, &sum, s);
  dev->fill_pattern_async(hbm, GiB, 3, s);
  s.synchronize();
  EXPECT_EQ(sum, 0u) << "checksums are off: they read 0";
  EXPECT_EQ(*word, 7u);
  EXPECT_LT(rss_bytes(), rss0 + 64 * MiB)
      << "100 GiB allocated and 16 GiB copied must not take RAM";
  dev->deallocate(memory_kind::pinned_host, word, 4096);
  dev->deallocate(memory_kind::pinned_host, host, 60 * GiB);
  dev->deallocate(memory_kind::device, hbm, 40 * GiB);
  EXPECT_EQ(sim_pinned_bytes_in_use(*dev), 0u);
  sim_config tiny = c;
  tiny.timing_only_real_below = 4096;  // would make the completion words address space
  EXPECT_THROW(make_sim_device(tiny), invalid_argument);
}

/// A fixed random walk over a pager: acquires (mutable tensors released dirty), prefetches,
/// evictions and compactions, each completed before the next (so only the pager's rules decide).
/// Returns every tensor's state after every step, then the counters.
std::vector<std::string> walk(device& dev) {
  pager_config cfg = small_pager_config(6);
  // Automatic compaction fires from whichever thread frees HBM (a completer, after a write-back),
  // so when it runs depends on thread timing even over one device; explicit compact() is walked.
  cfg.auto_compact = false;
  pager p(dev, cfg);
  std::vector<tensor_handle> h;
  const std::size_t sizes[] = {20 << 10,  64 << 10, 100 << 10, 8 << 10,
                               130 << 10, 40 << 10, 64 << 10,  3 << 10};
  for (std::size_t i = 0; i < 12; ++i) {
    const tensor_kind kind = i % 3 == 0 ? tensor_kind::mutable_state : tensor_kind::weight;
    h.push_back(p.register_tensor("t" + std::to_string(i), sizes[i % 8], kind));
  }
  stream s(dev);
  std::uint64_t x = 12345;
  auto next = [&x] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::size_t>(x >> 33);
  };
  std::vector<std::string> log;
  for (int step = 0; step < 400; ++step) {
    const std::size_t op = next() % 10, a = next() % h.size(), b = next() % h.size();
    std::ostringstream line;
    line << step << " op" << op << " t" << a << ":";
    try {
      if (op < 6) {
        (void)p.acquire(h[a], s, true);
        p.release(h[a], s, p.info(h[a]).kind == tensor_kind::mutable_state);
      } else if (op == 6) {
        p.prefetch(h[a]);
      } else if (op == 7) {
        p.evict(h[a]);
      } else if (op == 8) {
        line << " moves " << p.compact();
      } else {
        (void)p.acquire(h[a], s, true);
        if (b != a) (void)p.acquire(h[b], s, true);
        p.release(h[a], s, false);
        if (b != a) p.release(h[b], s, false);
      }
    } catch (const std::exception&) {
      line << " refused";
    }
    s.synchronize();
    p.synchronize();
    for (tensor_handle t : h) {
      const tensor_info i = p.info(t);
      line << ' ' << static_cast<int>(i.where) << (i.dirty ? "d" : "");
    }
    log.push_back(line.str());
  }
  const pager_metrics m = p.metrics();
  std::ostringstream end;
  end << "faults " << m.faults << " hits " << m.hits << " page_ins " << m.page_ins
      << " page_in_bytes " << m.page_in_bytes << " prefetches " << m.prefetches << " prefetch_hits "
      << m.prefetch_hits << " evictions " << m.evictions << " write_backs " << m.write_backs
      << " write_back_bytes " << m.write_back_bytes << " compactions " << m.compactions << " moves "
      << m.compaction_moves << " moved " << m.compaction_bytes;
  log.push_back(end.str());
  return log;
}

TEST(timing_only, the_pager_makes_the_same_decisions_with_and_without_the_bytes) {
  sim_config c;
  c.device_memory_bytes = 64 * MiB;
  c.pinned_memory_bytes = 128 * MiB;
  auto real = make_sim_device(c);
  c.timing_only = true;
  c.timing_only_real_below = 64 << 10;  // the host tier's slabs are address space too
  auto timing = make_sim_device(c);
  const std::vector<std::string> a = walk(*real), b = walk(*timing);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(a[i], b[i]) << "first difference at step " << i;
  EXPECT_NE(a.back().find("evictions"), std::string::npos);
  // The walk did exercise what it compares.
  EXPECT_EQ(a.back().find("faults 0 "), std::string::npos);
  EXPECT_EQ(a.back().find("write_backs 0 "), std::string::npos);
  EXPECT_EQ(a.back().find("moves 0 "), std::string::npos) << a.back();
}

/// The pager's choices are part of its contract: the walk's every step (where each tensor is after
/// it) and its counters are recorded in tests/data/timing_only_walk.txt. A change to the pager's
/// structure must leave them as they are; a deliberate change of policy regenerates the file with
/// HTP_UPDATE_GOLDEN=1 and says why in its commit.
TEST(timing_only, the_walk_makes_the_recorded_decisions) {
  sim_config c;
  c.device_memory_bytes = 64 * MiB;
  c.pinned_memory_bytes = 128 * MiB;
  auto dev = make_sim_device(c);
  const std::vector<std::string> got = walk(*dev);
  const std::string path = std::string(HTP_TEST_DATA_DIR) + "/timing_only_walk.txt";
  if (const char* update = std::getenv("HTP_UPDATE_GOLDEN"); update != nullptr && *update == '1') {
    std::ofstream out(path);
    for (const auto& line : got) out << line << '\n';
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "cannot read " << path << "; regenerate it with HTP_UPDATE_GOLDEN=1";
  std::vector<std::string> want;
  for (std::string line; std::getline(in, line);) want.push_back(line);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "first difference at line " << i;
}

TEST(timing_only, copy_to_host_is_refused_with_the_reason) {
  sim_config c;
  c.timing_only = true;
  c.device_memory_bytes = 64 * MiB;
  auto dev = make_sim_device(c);
  pager p(*dev, small_pager_config(4));
  const tensor_handle h = p.register_tensor("w", 10 << 10, tensor_kind::weight);
  std::vector<unsigned char> out(10 << 10);
  try {
    p.copy_to_host(h, out.data());
    FAIL() << "accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("timing-only"), std::string::npos) << e.what();
  }
}

// Two GPUs of 40 GB over a 96 GB host tier page 80 GB of sharded layers through, which no
// machine running CI could store: every layer's shard is paged in once per walk.
TEST(timing_only, a_node_pages_a_model_larger_than_this_machine) {
  const std::size_t rss0 = rss_bytes();
  std::vector<std::unique_ptr<device>> devs;
  std::vector<device*> ptrs;
  for (int g = 0; g < 2; ++g) {
    sim_config s;
    s.timing_only = true;
    s.device_memory_bytes = 40 * GiB;
    s.ordinal = g;
    devs.push_back(make_sim_device(s));
    ptrs.push_back(devs.back().get());
  }
  node_config c;
  c.host_budget_bytes = 96 * GiB;
  c.gpu.hbm_budget_bytes = 30 * GiB;
  c.gpu.chunk_bytes = 64 * MiB;
  c.gpu.h2d.link_bytes_per_second = 55'000'000'000;  // skip calibration
  c.gpu.d2h.link_bytes_per_second = 55'000'000'000;
  c.gpu.h2d.unlimited = true;
  c.gpu.d2h.unlimited = true;
  node n(ptrs, c);
  std::vector<node_tensor> layers;
  for (int l = 0; l < 40; ++l) {
    layers.push_back(
        n.register_sharded("layer" + std::to_string(l), {GiB, GiB}, tensor_kind::weight));
  }
  EXPECT_EQ(n.metrics().host_used_bytes, 80 * GiB);
  for (std::size_t g = 0; g < 2; ++g) {
    stream s(*devs[g]);
    for (const node_tensor& t : layers) {
      (void)n.gpu(g).acquire(n.on(t, g), s, true);
      n.gpu(g).release(n.on(t, g), s);
    }
    s.synchronize();
    const pager_metrics m = n.gpu(g).metrics();
    EXPECT_EQ(m.page_in_bytes, 40 * GiB) << "GPU " << g;
    EXPECT_GT(m.evictions, 0u) << "30 GB of HBM cannot hold 40 GB of shards";
  }
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr std::size_t slack = GiB;  // the sanitizer's shadow of every allocation counts too
#else
  constexpr std::size_t slack = 256 * MiB;
#endif
  EXPECT_LT(rss_bytes(), rss0 + slack) << "80 GiB of host copies must not be materialised";
}

}  // namespace
}  // namespace htp::test
