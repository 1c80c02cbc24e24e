// htp-integrity: the GPU integrity run of issue 7. Registers N tensors (sizes log-uniform between
// --min-kib and --max-mib, a mix of weights and mutable KV blocks) against an HBM budget far smaller
// than their sum, then runs --ops operations with Zipf-distributed access: acquire + checksum kernel
// (every acquire is verified on the device: device::checksum_async is a CUDA kernel on cuda),
// acquire + write (fill kernel) + release dirty, prefetch hints, evictions and compactions. At the
// end every tensor is read back through the host path, everything is unregistered, and the device's
// free memory (cudaMemGetInfo on cuda) must be back at its starting value: exactly on sim; on cuda
// within a tolerance of half a slab (at least 2 MiB), sampled after a warm-up that has made the
// driver's own lazy allocations (streams, kernels, the checksum scratch), so that only a leaked
// slab, not the driver's bookkeeping, can fail the run.
// Exits 1 on any checksum mismatch or unreturned memory. Defaults suit sim (~20 s); the full run is
//   htp-integrity --backend cuda --tensors 600 --max-mib 48 --hbm-mib 1024 --ops 10000
#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/pager.hpp>
#include <htp/sim_device.hpp>

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

struct tensor {
  htp::tensor_handle h;
  std::size_t bytes = 0;
  htp::tensor_kind kind = htp::tensor_kind::weight;
  std::uint64_t sum = 0;
};

constexpr std::size_t mib = std::size_t{1} << 20;

std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"htp-integrity: nothing lost under paging pressure (checksums verified on the device)"};
  std::string backend_name = "auto";
  std::size_t tensors = 300;
  double min_kib = 4;
  double max_mib = 16;
  std::size_t hbm_mib = 256;
  std::size_t ops = 10000;
  double zipf = 1.1;
  double write_fraction = 0.2;
  std::size_t compact_every = 500;
  std::uint64_t seed = 1;
  bool checked = false;
  std::string json_path;
  app.add_option("--backend", backend_name, "auto, cuda or sim")->check(CLI::IsMember({"auto", "cuda", "sim"}));
  app.add_option("--tensors", tensors, "tensors registered");
  app.add_option("--min-kib", min_kib, "smallest tensor, KiB");
  app.add_option("--max-mib", max_mib, "largest tensor, MiB (sizes are log-uniform in between)");
  app.add_option("--hbm-mib", hbm_mib, "HBM budget of the pager, MiB");
  app.add_option("--ops", ops, "operations");
  app.add_option("--zipf", zipf, "Zipf exponent of the access distribution");
  app.add_option("--write-fraction", write_fraction, "share of accesses to mutable tensors that write");
  app.add_option("--compact-every", compact_every, "an explicit compaction every N operations (0: never)");
  app.add_option("--seed", seed, "random seed (sizes, kinds, accesses, payloads)");
  app.add_flag("--checked", checked, "pager checked mode: poison freed HBM, audit allocators");
  app.add_option("--json", json_path, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (tensors == 0 || ops == 0 || min_kib <= 0 || max_mib * 1024 < min_kib || hbm_mib == 0) {
    fmt::print(stderr, "htp-integrity: need tensors, ops, hbm > 0 and min-kib <= max-mib\n");
    return 2;
  }

  std::mt19937_64 rng(seed);
  std::vector<std::size_t> sizes(tensors);
  const double lo = std::log(min_kib * 1024), hi = std::log(max_mib * static_cast<double>(mib));
  for (auto& s : sizes) s = static_cast<std::size_t>(std::exp(std::uniform_real_distribution<double>(lo, hi)(rng)));
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
  const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});

  const bool want_sim = backend_name == "sim" || (backend_name == "auto" && htp::cuda_device_count() == 0);
  // Slabs: at least 64 per HBM budget (each size class holds whole slabs; with ~50 classes in
  // play, fewer slabs would make small tensors evict each other for class slabs), 16 MiB at most.
  std::size_t slab = 16 * mib;
  while (slab > (std::size_t{64} << 10) && hbm_mib * mib / slab < 64) slab /= 2;
  // Host budget: whole slabs for large tensors; per size class (4 per power of two) its bytes with
  // headroom plus one slab, since a class slab holds one class only.
  std::map<std::pair<int, int>, std::size_t> class_bytes;
  std::size_t host_budget = 8 * slab;
  for (std::size_t s : sizes) {
    if (s >= slab / 2) {
      host_budget += round_up(s, slab);
    } else {
      int msb = 0;
      while ((s >> (msb + 1)) != 0) ++msb;
      const int quarter = msb >= 2 ? static_cast<int>((s >> (msb - 2)) & 3) : 0;
      class_bytes[{msb, quarter}] += s;
    }
  }
  for (const auto& [cls, bytes] : class_bytes) host_budget += round_up(bytes + bytes / 2, slab) + slab;
  std::unique_ptr<htp::device> dev;
  try {
    if (want_sim) {
      htp::sim_config sc;
      sc.device_memory_bytes = hbm_mib * mib + 256 * mib;
      dev = htp::make_sim_device(sc);
    } else {
      dev = htp::make_device(htp::backend::cuda);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "htp-integrity: no device: {}\n", e.what());
    return 2;
  }
  const auto& props = dev->properties();
  // Warm-up: exercise every device path the run uses once (a stream, device and pinned memory, the
  // fill and checksum kernels, copies) so that what the driver allocates lazily for them is already
  // taken when the starting free memory is sampled.
  {
    htp::stream warm(*dev);
    void* d = dev->allocate(htp::memory_kind::device, slab);
    void* h = dev->allocate(htp::memory_kind::pinned_host, slab);
    dev->fill_pattern_async(d, slab, 1, warm);
    dev->checksum_async(d, slab, static_cast<std::uint64_t*>(h), warm);
    dev->copy_async(static_cast<char*>(h) + 8, d, slab - 8, htp::copy_direction::device_to_host, warm);
    dev->copy_async(d, h, slab, htp::copy_direction::host_to_device, warm);
    warm.synchronize();
    dev->deallocate(htp::memory_kind::pinned_host, h, slab);
    dev->deallocate(htp::memory_kind::device, d, slab);
  }
  dev->synchronize_all();
  const std::size_t free_at_start = dev->memory().free_bytes;
  // A leak htp could cause is a whole slab; the driver may move free memory by a 2 MiB page.
  const std::size_t tolerance = want_sim ? 0 : std::max<std::size_t>(slab / 2, 2 * mib);
  fmt::print("htp-integrity on {} ({}): {} tensors, {:.1f} MiB total (largest {:.1f} MiB), HBM budget "
              "{} MiB, slab {} MiB, {} ops, zipf {:.2f}, seed {}{}\n",
              props.name, htp::to_string(props.kind), tensors,
              static_cast<double>(total) / static_cast<double>(mib),
              static_cast<double>(largest) / static_cast<double>(mib), hbm_mib, slab / mib, ops, zipf,
              static_cast<unsigned long long>(seed), checked ? ", checked mode" : "");

  std::uint64_t mismatches = 0, host_mismatches = 0, oom = 0, writes = 0, reads = 0, prefetches = 0,
                explicit_compactions = 0, explicit_evictions = 0;
  htp::pager_metrics m{};
  const auto t0 = std::chrono::steady_clock::now();
  {
    htp::pager_config c;
    c.hbm_budget_bytes = hbm_mib * mib;
    c.host_budget_bytes = host_budget;
    c.slab_bytes = slab;
    c.h2d.unlimited = true;
    c.d2h.unlimited = true;
    if (want_sim) {
      c.h2d.link_bytes_per_second = 20'000'000'000;
      c.d2h.link_bytes_per_second = 20'000'000'000;
    }
    c.checked = checked;
    c.prefetch_lookahead = 0;
    htp::pager p(*dev, c);
    htp::stream compute(*dev);
    auto* slots = static_cast<std::uint64_t*>(dev->allocate(htp::memory_kind::pinned_host, 16));

    std::vector<tensor> ts(tensors);
    std::vector<unsigned char> staging;
    for (std::size_t i = 0; i < tensors; ++i) {
      auto& t = ts[i];
      t.bytes = sizes[i];
      t.kind = rng() % 3 == 0 ? htp::tensor_kind::mutable_state : htp::tensor_kind::weight;
      staging.resize(t.bytes);
      htp::fill_pattern(staging.data(), t.bytes, seed * 1'000'003 + i);
      t.sum = htp::checksum(staging.data(), t.bytes);
      t.h = p.register_tensor("t" + std::to_string(i), t.bytes, t.kind, staging.data());
    }
    staging = {};
    // Zipf over ranks, ranks over a random permutation of the tensors.
    std::vector<double> cdf(tensors);
    double acc = 0;
    for (std::size_t r = 0; r < tensors; ++r) cdf[r] = acc += 1.0 / std::pow(static_cast<double>(r + 1), zipf);
    std::vector<std::size_t> perm(tensors);
    std::iota(perm.begin(), perm.end(), std::size_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    auto pick = [&] {
      const double u = std::uniform_real_distribution<double>(0, acc)(rng);
      const auto r = static_cast<std::size_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      return perm[std::min(r, tensors - 1)];
    };

    for (std::size_t op = 0; op < ops; ++op) {
      const std::size_t i = pick();
      auto& t = ts[i];
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      try {
        if (u < 0.05) {
          p.prefetch(ts[pick()].h);
          ++prefetches;
        } else if (u < 0.07) {
          p.evict(t.h);
          ++explicit_evictions;
        } else {
          const bool write = t.kind == htp::tensor_kind::mutable_state && u < 0.07 + write_fraction;
          const htp::device_span s = p.acquire(t.h, compute);
          dev->checksum_async(s.data, s.bytes, &slots[0], compute);  // verify what arrived
          if (write) {
            dev->fill_pattern_async(s.data, s.bytes, rng(), compute);
            dev->checksum_async(s.data, s.bytes, &slots[1], compute);  // the new truth
          }
          p.release(t.h, compute, write);
          compute.synchronize();
          if (slots[0] != t.sum) {
            ++mismatches;
            fmt::print(stderr, "MISMATCH op {} tensor {} ({} bytes): {:016x} != {:016x}\n", op, i,
                         t.bytes, static_cast<unsigned long long>(slots[0]),
                         static_cast<unsigned long long>(t.sum));
          }
          if (write) {
            t.sum = slots[1];
            ++writes;
          } else {
            ++reads;
          }
        }
      } catch (const htp::out_of_memory& e) {
        ++oom;
        fmt::print(stderr, "out of memory at op {}: {}\n", op, e.what());
      }
      if (compact_every != 0 && (op + 1) % compact_every == 0) {
        p.compact();
        ++explicit_compactions;
      }
    }
    // Nothing lost: every tensor through the host path, then teardown.
    std::vector<unsigned char> out;
    for (std::size_t i = 0; i < tensors; ++i) {
      out.resize(ts[i].bytes);
      p.copy_to_host(ts[i].h, out.data());
      if (htp::checksum(out.data(), out.size()) != ts[i].sum) {
        ++host_mismatches;
        fmt::print(stderr, "MISMATCH at the end: tensor {} (host path)\n", i);
      }
    }
    m = p.metrics();
    for (auto& t : ts) p.unregister_tensor(t.h);
    dev->deallocate(htp::memory_kind::pinned_host, slots, 16);
  }
  dev->synchronize_all();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::size_t free_at_end = dev->memory().free_bytes;
  const std::size_t drift = free_at_end > free_at_start ? free_at_end - free_at_start : free_at_start - free_at_end;
  const bool returned = want_sim ? free_at_end == free_at_start : (free_at_end >= free_at_start || drift <= tolerance);

  fmt::print("ops {} (reads {}, writes {}, prefetch hints {}, explicit evictions {}, explicit compactions {}) in {:.1f} s\n",
              ops, static_cast<unsigned long long>(reads), static_cast<unsigned long long>(writes),
              static_cast<unsigned long long>(prefetches), static_cast<unsigned long long>(explicit_evictions),
              static_cast<unsigned long long>(explicit_compactions), seconds);
  fmt::print("faults {}, evictions {}, write-backs {}, compactions {} ({} moves), page-in {:.1f} GiB, oom {}\n",
              static_cast<unsigned long long>(m.faults), static_cast<unsigned long long>(m.evictions),
              static_cast<unsigned long long>(m.write_backs), static_cast<unsigned long long>(m.compactions),
              static_cast<unsigned long long>(m.compaction_moves),
              static_cast<double>(m.page_in_bytes) / static_cast<double>(mib * 1024),
              static_cast<unsigned long long>(oom));
  fmt::print("checksum mismatches: {} on the device, {} through the host path\n",
              static_cast<unsigned long long>(mismatches), static_cast<unsigned long long>(host_mismatches));
  fmt::print("device memory returned: {} (free {} at start, {} at end, difference {}, tolerance {})\n",
              returned ? "yes" : "NO", free_at_start, free_at_end, drift, tolerance);

  if (!json_path.empty()) {
    nlohmann::json j;
    j["device"] = {{"name", props.name}, {"backend", htp::to_string(props.kind)}};
    j["config"] = {{"tensors", tensors}, {"total_bytes", total}, {"largest_bytes", largest},
                   {"hbm_budget_bytes", hbm_mib * mib}, {"slab_bytes", slab}, {"ops", ops},
                   {"zipf", zipf}, {"write_fraction", write_fraction}, {"seed", seed}, {"checked", checked}};
    j["results"] = {{"reads", reads}, {"writes", writes}, {"faults", m.faults}, {"evictions", m.evictions},
                    {"write_backs", m.write_backs}, {"compactions", m.compactions},
                    {"compaction_moves", m.compaction_moves}, {"page_in_bytes", m.page_in_bytes},
                    {"out_of_memory", oom}, {"device_checksum_mismatches", mismatches},
                    {"host_checksum_mismatches", host_mismatches}, {"memory_returned", returned},
                    {"free_bytes_start", free_at_start}, {"free_bytes_end", free_at_end},
                    {"free_bytes_tolerance", tolerance},
                    {"seconds", seconds}};
    j["metrics"] = nlohmann::json::parse(htp::to_json(m));
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return mismatches == 0 && host_mismatches == 0 && returned ? 0 : 1;
}
