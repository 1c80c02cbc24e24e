// htp-integrity: the GPU integrity run. Registers N tensors (sizes log-uniform between
// --min-kib and --max-mib, a mix of weights and mutable KV blocks) against an HBM budget far
// smaller than their sum, then runs --ops operations with Zipf-distributed access: acquire +
// checksum kernel (every acquire is verified on the device: device::checksum_async is a CUDA kernel
// on cuda), acquire + write (fill kernel) + release dirty, prefetch hints, evictions and
// compactions. At the end every tensor is read back through the host path, everything is
// unregistered, and the device's free memory (cudaMemGetInfo on cuda) must be back at its starting
// value: exactly on sim; on cuda within a tolerance of half a slab (at least 2 MiB), sampled after
// a warm-up that has made the driver's own lazy allocations (streams, kernels, the checksum
// scratch), so that only a leaked slab, not the driver's bookkeeping, can fail the run. Exits 1 on
// any checksum mismatch or unreturned memory. Defaults suit sim (~20 s); the full run is
//   htp-integrity --backend cuda --tensors 600 --max-mib 48 --hbm-mib 1024 --ops 10000
#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/pager.hpp>
#include <htp/sim_device.hpp>

#include "common/bench_device.hpp"

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

/// htp-integrity's options, with their defaults.
struct options {
  htp::bench::device_options device;
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
};

/// Parses argv into `o`. Returns -1 to go on, or the exit code to return now (0 after --help;
/// 2, reported, for a bad command line or sizes).
int parse_options(int argc, char** argv, options& o) {
  CLI::App app{
      "htp-integrity: nothing lost under paging pressure (checksums verified on the device)"};
  htp::bench::add_backend_option(app, o.device.backend);
  app.add_option("--tensors", o.tensors, "tensors registered");
  app.add_option("--min-kib", o.min_kib, "smallest tensor, KiB");
  app.add_option("--max-mib", o.max_mib, "largest tensor, MiB (sizes are log-uniform in between)");
  app.add_option("--hbm-mib", o.hbm_mib, "HBM budget of the pager, MiB");
  app.add_option("--ops", o.ops, "operations");
  app.add_option("--zipf", o.zipf, "Zipf exponent of the access distribution");
  app.add_option("--write-fraction", o.write_fraction,
                 "share of accesses to mutable tensors that write");
  app.add_option("--compact-every", o.compact_every,
                 "an explicit compaction every N operations (0: never)");
  app.add_option("--seed", o.seed, "random seed (sizes, kinds, accesses, payloads)");
  app.add_flag("--checked", o.checked, "pager checked mode: poison freed HBM, audit allocators");
  app.add_option("--json", o.json_path, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (o.tensors == 0 || o.ops == 0 || o.min_kib <= 0 || o.max_mib * 1024 < o.min_kib ||
      o.hbm_mib == 0) {
    fmt::print(stderr, "htp-integrity: need tensors, ops, hbm > 0 and min-kib <= max-mib\n");
    return 2;
  }
  return -1;
}

/// The slab size: at least 64 per HBM budget (each size class holds whole slabs; with ~50 classes
/// in play, fewer slabs would make small tensors evict each other for class slabs), 16 MiB at most.
std::size_t slab_for(std::size_t hbm_mib) {
  std::size_t slab = 16 * mib;
  while (slab > (std::size_t{64} << 10) && hbm_mib * mib / slab < 64) slab /= 2;
  return slab;
}

/// The host budget: whole slabs for large tensors; per size class (4 per power of two) its bytes
/// with headroom plus one slab, since a class slab holds one class only.
std::size_t host_budget_for(const std::vector<std::size_t>& sizes, std::size_t slab) {
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
  for (const auto& [cls, bytes] : class_bytes)
    host_budget += round_up(bytes + bytes / 2, slab) + slab;
  return host_budget;
}

/// Exercises every device path the run uses once (a stream, device and pinned memory, the fill
/// and checksum kernels, copies), so that what the driver allocates lazily for them is already
/// taken when the starting free memory is sampled.
void warm_up(htp::device& dev, std::size_t slab) {
  htp::stream warm(dev);
  void* d = dev.allocate(htp::memory_kind::device, slab);
  void* h = dev.allocate(htp::memory_kind::pinned_host, slab);
  dev.fill_pattern_async(d, slab, 1, warm);
  dev.checksum_async(d, slab, static_cast<std::uint64_t*>(h), warm);
  dev.copy_async(static_cast<char*>(h) + 8, d, slab - 8, htp::copy_direction::device_to_host, warm);
  dev.copy_async(d, h, slab, htp::copy_direction::host_to_device, warm);
  warm.synchronize();
  dev.deallocate(htp::memory_kind::pinned_host, h, slab);
  dev.deallocate(htp::memory_kind::device, d, slab);
}

/// What the run counted, and the pager's metrics at its end.
struct counts {
  std::uint64_t mismatches = 0, host_mismatches = 0, oom = 0, writes = 0, reads = 0, prefetches = 0,
                explicit_compactions = 0, explicit_evictions = 0;
  htp::pager_metrics m{};
};

/// Registers the tensors with `p` (a third mutable, payloads from the seed) and returns them.
std::vector<tensor> register_tensors(htp::pager& p, const options& o,
                                     const std::vector<std::size_t>& sizes, std::mt19937_64& rng) {
  std::vector<tensor> ts(o.tensors);
  std::vector<unsigned char> staging;
  for (std::size_t i = 0; i < o.tensors; ++i) {
    auto& t = ts[i];
    t.bytes = sizes[i];
    t.kind = rng() % 3 == 0 ? htp::tensor_kind::mutable_state : htp::tensor_kind::weight;
    staging.resize(t.bytes);
    htp::fill_pattern(staging.data(), t.bytes, o.seed * 1'000'003 + i);
    t.sum = htp::checksum(staging.data(), t.bytes);
    t.h = p.register_tensor("t" + std::to_string(i), t.bytes, t.kind, staging.data());
  }
  return ts;
}

/// The operations: Zipf-distributed picks (over ranks, ranks over a random permutation of the
/// tensors), each a prefetch hint, an eviction, or an acquire verified on the device (and for some
/// mutable tensors a write, released dirty); an explicit compaction every compact_every.
void run_ops(htp::device& dev, htp::pager& p, const options& o, std::vector<tensor>& ts,
             std::mt19937_64& rng, counts& c) {
  htp::stream compute(dev);
  auto* slots = static_cast<std::uint64_t*>(dev.allocate(htp::memory_kind::pinned_host, 16));
  std::vector<double> cdf(o.tensors);
  double acc = 0;
  for (std::size_t r = 0; r < o.tensors; ++r)
    cdf[r] = acc += 1.0 / std::pow(static_cast<double>(r + 1), o.zipf);
  std::vector<std::size_t> perm(o.tensors);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  auto pick = [&] {
    const double u = std::uniform_real_distribution<double>(0, acc)(rng);
    const auto r =
        static_cast<std::size_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    return perm[std::min(r, o.tensors - 1)];
  };
  for (std::size_t op = 0; op < o.ops; ++op) {
    const std::size_t i = pick();
    auto& t = ts[i];
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    try {
      if (u < 0.05) {
        p.prefetch(ts[pick()].h);
        ++c.prefetches;
      } else if (u < 0.07) {
        p.evict(t.h);
        ++c.explicit_evictions;
      } else {
        const bool write = t.kind == htp::tensor_kind::mutable_state && u < 0.07 + o.write_fraction;
        const htp::device_span s = p.acquire(t.h, compute);
        dev.checksum_async(s.data, s.bytes, &slots[0], compute);  // verify what arrived
        if (write) {
          dev.fill_pattern_async(s.data, s.bytes, rng(), compute);
          dev.checksum_async(s.data, s.bytes, &slots[1], compute);  // the new truth
        }
        p.release(t.h, compute, write);
        compute.synchronize();
        if (slots[0] != t.sum) {
          ++c.mismatches;
          fmt::print(stderr, "MISMATCH op {} tensor {} ({} bytes): {:016x} != {:016x}\n", op, i,
                     t.bytes, static_cast<unsigned long long>(slots[0]),
                     static_cast<unsigned long long>(t.sum));
        }
        if (write) {
          t.sum = slots[1];
          ++c.writes;
        } else {
          ++c.reads;
        }
      }
    } catch (const htp::out_of_memory& e) {
      ++c.oom;
      fmt::print(stderr, "out of memory at op {}: {}\n", op, e.what());
    }
    if (o.compact_every != 0 && (op + 1) % o.compact_every == 0) {
      p.compact();
      ++c.explicit_compactions;
    }
  }
  dev.deallocate(htp::memory_kind::pinned_host, slots, 16);
}

/// The run under a pager: the tensors registered, the operations, every tensor read back through
/// the host path (nothing lost), then teardown.
counts run_pager(htp::device& dev, const options& o, const std::vector<std::size_t>& sizes,
                 std::size_t slab, std::size_t host_budget, bool sim, std::mt19937_64& rng) {
  counts c;
  htp::pager_config pc;
  pc.hbm_budget_bytes = o.hbm_mib * mib;
  pc.host_budget_bytes = host_budget;
  pc.slab_bytes = slab;
  pc.h2d.unlimited = true;
  pc.d2h.unlimited = true;
  if (sim) {
    pc.h2d.link_bytes_per_second = 20'000'000'000;
    pc.d2h.link_bytes_per_second = 20'000'000'000;
  }
  pc.checked = o.checked;
  pc.prefetch_lookahead = 0;
  htp::pager p(dev, pc);
  std::vector<tensor> ts = register_tensors(p, o, sizes, rng);
  run_ops(dev, p, o, ts, rng, c);
  std::vector<unsigned char> out;
  for (std::size_t i = 0; i < o.tensors; ++i) {
    out.resize(ts[i].bytes);
    p.copy_to_host(ts[i].h, out.data());
    if (htp::checksum(out.data(), out.size()) != ts[i].sum) {
      ++c.host_mismatches;
      fmt::print(stderr, "MISMATCH at the end: tensor {} (host path)\n", i);
    }
  }
  c.m = p.metrics();
  for (auto& t : ts) p.unregister_tensor(t.h);
  return c;
}

/// Free device memory before and after the run, and whether the run gave all of it back.
struct memory_check {
  std::size_t free_at_start = 0, free_at_end = 0, drift = 0, tolerance = 0;
  bool returned = false;
};

/// Prints the run's counts, the pager's and the memory check.
void print_results(const options& o, const counts& c, double seconds, const memory_check& mc) {
  const htp::pager_metrics& m = c.m;
  fmt::print("ops {} (reads {}, writes {}, prefetch hints {}, explicit evictions {}, explicit "
             "compactions {}) in {:.1f} s\n",
             o.ops, static_cast<unsigned long long>(c.reads),
             static_cast<unsigned long long>(c.writes),
             static_cast<unsigned long long>(c.prefetches),
             static_cast<unsigned long long>(c.explicit_evictions),
             static_cast<unsigned long long>(c.explicit_compactions), seconds);
  fmt::print("faults {}, evictions {}, write-backs {}, compactions {} ({} moves), page-in {:.1f} "
             "GiB, oom {}\n",
             static_cast<unsigned long long>(m.faults),
             static_cast<unsigned long long>(m.evictions),
             static_cast<unsigned long long>(m.write_backs),
             static_cast<unsigned long long>(m.compactions),
             static_cast<unsigned long long>(m.compaction_moves),
             static_cast<double>(m.page_in_bytes) / static_cast<double>(mib * 1024),
             static_cast<unsigned long long>(c.oom));
  fmt::print("checksum mismatches: {} on the device, {} through the host path\n",
             static_cast<unsigned long long>(c.mismatches),
             static_cast<unsigned long long>(c.host_mismatches));
  fmt::print(
      "device memory returned: {} (free {} at start, {} at end, difference {}, tolerance {})\n",
      mc.returned ? "yes" : "NO", mc.free_at_start, mc.free_at_end, mc.drift, mc.tolerance);
}

/// Writes the device, the configuration, the results and the pager's metrics as JSON.
void write_json(const options& o, const htp::device_properties& props, std::size_t total,
                std::size_t largest, std::size_t slab, const counts& c, double seconds,
                const memory_check& mc) {
  const htp::pager_metrics& m = c.m;
  nlohmann::json j;
  j["device"] = {{"name", props.name}, {"backend", htp::to_string(props.kind)}};
  j["config"] = {{"tensors", o.tensors},     {"total_bytes", total},
                 {"largest_bytes", largest}, {"hbm_budget_bytes", o.hbm_mib * mib},
                 {"slab_bytes", slab},       {"ops", o.ops},
                 {"zipf", o.zipf},           {"write_fraction", o.write_fraction},
                 {"seed", o.seed},           {"checked", o.checked}};
  j["results"] = {{"reads", c.reads},
                  {"writes", c.writes},
                  {"faults", m.faults},
                  {"evictions", m.evictions},
                  {"write_backs", m.write_backs},
                  {"compactions", m.compactions},
                  {"compaction_moves", m.compaction_moves},
                  {"page_in_bytes", m.page_in_bytes},
                  {"out_of_memory", c.oom},
                  {"device_checksum_mismatches", c.mismatches},
                  {"host_checksum_mismatches", c.host_mismatches},
                  {"memory_returned", mc.returned},
                  {"free_bytes_start", mc.free_at_start},
                  {"free_bytes_end", mc.free_at_end},
                  {"free_bytes_tolerance", mc.tolerance},
                  {"seconds", seconds}};
  j["metrics"] = nlohmann::json::parse(htp::to_json(m));
  std::ofstream(o.json_path) << j.dump(2) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;
  std::mt19937_64 rng(o.seed);
  std::vector<std::size_t> sizes(o.tensors);
  const double lo = std::log(o.min_kib * 1024), hi = std::log(o.max_mib * static_cast<double>(mib));
  for (auto& s : sizes)
    s = static_cast<std::size_t>(std::exp(std::uniform_real_distribution<double>(lo, hi)(rng)));
  const std::size_t largest = *std::max_element(sizes.begin(), sizes.end());
  const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});

  const bool want_sim = htp::bench::wants_sim(o.device.backend);
  const std::size_t slab = slab_for(o.hbm_mib);
  const std::size_t host_budget = host_budget_for(sizes, slab);
  std::unique_ptr<htp::device> dev;
  try {
    o.device.backend = want_sim ? "sim" : "cuda";
    o.device.sim_memory_bytes = o.hbm_mib * mib + 256 * mib;
    o.device.sim_poison =
        true;  // fresh device memory poisoned: a read of unwritten bytes fails its checksum
    dev = htp::bench::make_bench_device(o.device);
  } catch (const std::exception& e) {
    fmt::print(stderr, "htp-integrity: no device: {}\n", e.what());
    return 2;
  }
  const auto& props = dev->properties();
  warm_up(*dev, slab);
  dev->synchronize_all();
  memory_check mc;
  mc.free_at_start = dev->memory().free_bytes;
  // A leak htp could cause is a whole slab; the driver may move free memory by a 2 MiB page.
  mc.tolerance = want_sim ? 0 : std::max<std::size_t>(slab / 2, 2 * mib);
  fmt::print(
      "htp-integrity on {} ({}): {} tensors, {:.1f} MiB total (largest {:.1f} MiB), HBM budget "
      "{} MiB, slab {} MiB, {} ops, zipf {:.2f}, seed {}{}\n",
      props.name, htp::to_string(props.kind), o.tensors,
      static_cast<double>(total) / static_cast<double>(mib),
      static_cast<double>(largest) / static_cast<double>(mib), o.hbm_mib, slab / mib, o.ops, o.zipf,
      static_cast<unsigned long long>(o.seed), o.checked ? ", checked mode" : "");

  const auto t0 = std::chrono::steady_clock::now();
  const counts c = run_pager(*dev, o, sizes, slab, host_budget, want_sim, rng);
  dev->synchronize_all();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  mc.free_at_end = dev->memory().free_bytes;
  mc.drift = mc.free_at_end > mc.free_at_start ? mc.free_at_end - mc.free_at_start
                                               : mc.free_at_start - mc.free_at_end;
  mc.returned = want_sim ? mc.free_at_end == mc.free_at_start
                         : (mc.free_at_end >= mc.free_at_start || mc.drift <= mc.tolerance);
  print_results(o, c, seconds, mc);
  if (!o.json_path.empty()) write_json(o, props, total, largest, slab, c, seconds, mc);
  return c.mismatches == 0 && c.host_mismatches == 0 && mc.returned ? 0 : 1;
}
