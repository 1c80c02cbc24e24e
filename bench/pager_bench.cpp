// Per-call host cost of the pager against the number of registered tensors: ns per
// acquire+release pair at 10^2 .. 10^6 tensors, all resident and with eviction active, and a list
// acquire of a 64-block table next to 64 single calls, and the 10^6 / 10^2 ratio measured side by
// side in one run (flat_per_call). Google Benchmark; JSON with
// --benchmark_out=FILE --benchmark_out_format=json (scripts/bench.sh --scale does this).
#include <htp/pager.hpp>
#include <htp/sim_device.hpp>

#include "common/bench_device.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

/// One pager with `n` registered tensors of `bytes` bytes, kept across the repetitions of one
/// benchmark argument (registering 10^6 tensors takes seconds).
struct world {
  std::size_t n = 0;
  bool evicting = false;
  std::unique_ptr<htp::device> dev;
  std::unique_ptr<htp::pager> pager;
  std::unique_ptr<htp::stream> compute;
  std::vector<htp::tensor_handle> hs;
  std::size_t cursor =
      0;  // where the walk goes on: Google Benchmark calls a function several times
  /// Tears down in dependency order: the pager and stream before their device.
  void reset() {
    hs.clear();
    compute.reset();
    pager.reset();
    dev.reset();
    n = 0;
    cursor = 0;
  }
};

constexpr std::size_t tensor_bytes = 1 * KiB;

/// Builds `w` with `n` tensors (see get_world).
void build_world(world& w, std::size_t n, bool evicting);

world& get_world(std::size_t n, bool evicting) {
  static world w;
  if (w.n == n && w.evicting == evicting) return w;
  w.reset();  // drop the previous one first: memory
  build_world(w, n, evicting);
  return w;
}

void build_world(world& w, std::size_t n, bool evicting) {
  w.n = n;
  w.evicting = evicting;
  const std::size_t data = n * tensor_bytes;
  const std::size_t slab = 64 * KiB;
  const auto round = [&](std::size_t b) { return (b + slab - 1) / slab * slab; };
  // All resident: HBM holds everything (bins pack 64 tensors a slab, plus room); evicting: half.
  const std::size_t hbm =
      evicting ? std::max(slab, round(data / 2)) : round(data + data / 4 + slab);
  htp::bench::device_options d;
  d.backend = "sim";
  d.sim_memory_bytes = hbm + 64 * MiB;
  w.dev = htp::bench::make_bench_device(d);
  htp::pager_config c;
  c.hbm_budget_bytes = hbm;
  c.host_budget_bytes = round(data + data / 4 + slab);
  c.slab_bytes = slab;
  c.h2d.link_bytes_per_second = 10'000'000'000;
  c.h2d.unlimited = true;
  c.d2h.link_bytes_per_second = 10'000'000'000;
  c.d2h.unlimited = true;
  c.auto_compact = false;
  c.eviction = htp::eviction_rule::lru;
  w.pager = std::make_unique<htp::pager>(*w.dev, c);
  w.compute = std::make_unique<htp::stream>(*w.dev);
  w.hs.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    w.hs.push_back(
        w.pager->register_tensor("t" + std::to_string(i), tensor_bytes, htp::tensor_kind::weight));
  }
  if (evicting) {
    // LRU on a sweep twice HBM's size: after one pass every acquire is a fault and an eviction.
    for (auto h : w.hs) {
      w.pager->acquire(h, *w.compute);
      w.pager->release(h, *w.compute);
    }
    w.compute->synchronize();
  } else {
    for (auto h : w.hs) {  // page everything in once
      w.pager->acquire(h, *w.compute);
      w.pager->release(h, *w.compute);
    }
    w.compute->synchronize();
    w.pager->synchronize();
  }
}

void acquire_release_pair(benchmark::State& state, bool evicting) {
  world& w = get_world(static_cast<std::size_t>(state.range(0)), evicting);
  auto& p = *w.pager;
  const std::size_t n = w.n;
  std::size_t i = w.cursor;
  // Resident: a scattered walk (stride coprime to n) so no cache line is warm by luck. Evicting:
  // the sweep's order, every acquire a fault (H2D copy) with an eviction (LRU) behind it.
  const std::size_t stride = evicting ? 1 : 7919;
  const auto before = p.metrics();
  for (auto _ : state) {
    const auto h = w.hs[i];
    benchmark::DoNotOptimize(p.acquire(h, *w.compute));
    p.release(h, *w.compute);
    i = (i + stride) % n;
  }
  w.cursor = i;
  w.compute->synchronize();
  const auto after = p.metrics();
  state.counters["tensors"] = static_cast<double>(n);
  state.counters["page_ins_per_pair"] = static_cast<double>(after.page_ins - before.page_ins) /
                                        static_cast<double>(state.iterations());
  state.counters["evictions_per_pair"] = static_cast<double>(after.evictions - before.evictions) /
                                         static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations());
}

void resident(benchmark::State& s) { acquire_release_pair(s, false); }

/// This thread's CPU time in ns.
double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

/// Thread CPU ns per acquire+release pair over `pairs` pairs of `w`'s scattered walk.
double cpu_per_pair(world& w, std::size_t pairs) {
  const double t0 = thread_cpu_ns();
  for (std::size_t k = 0; k < pairs; ++k) {
    const auto h = w.hs[w.cursor];
    benchmark::DoNotOptimize(w.pager->acquire(h, *w.compute));
    w.pager->release(h, *w.compute);
    w.cursor = (w.cursor + 7919) % w.n;
  }
  const double ns = (thread_cpu_ns() - t0) / static_cast<double>(pairs);
  w.compute->synchronize();
  return ns;
}

/// The per-call cost at 10^6 registered tensors against 10^2, side by side in one run: both
/// pagers live at once and the walk alternates between them in rounds of 20,000 pairs, so what
/// the machine does meanwhile (this one is shared) weighs on both alike. Counters: the median of
/// the rounds' ratios of thread CPU time per pair (the claim: within 2x), and each side's median.
void flat_per_call(benchmark::State& state) {
  world small, large;
  build_world(small, 100, false);
  build_world(large, 1'000'000, false);
  std::vector<double> ratios, a, b;
  for (auto _ : state) {
    for (int round = 0; round < 10; ++round) {
      a.push_back(cpu_per_pair(small, 20'000));
      b.push_back(cpu_per_pair(large, 20'000));
      ratios.push_back(b.back() / a.back());
    }
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  state.counters["cpu_ns_per_pair_1e2"] = median(a);
  state.counters["cpu_ns_per_pair_1e6"] = median(b);
  state.counters["cpu_ratio_1e6_over_1e2"] = median(ratios);
  small.reset();
  large.reset();
}
void evicting(benchmark::State& s) { acquire_release_pair(s, true); }

/// A 64-block table at 10^5 registered tensors: one list call each way, next to 64 single calls.
void block_table(benchmark::State& state) {
  world& w = get_world(100'000, false);
  const bool list = state.range(0) != 0;
  std::vector<htp::tensor_handle> table;
  std::size_t next = 0;
  for (auto _ : state) {
    table.clear();
    for (int b = 0; b < 64; ++b) {
      table.push_back(w.hs[next]);
      next = (next + 7919) % w.n;
    }
    if (list) {
      benchmark::DoNotOptimize(w.pager->acquire(table, *w.compute));
      w.pager->release(table, *w.compute);
    } else {
      for (auto h : table) benchmark::DoNotOptimize(w.pager->acquire(h, *w.compute));
      for (auto h : table) w.pager->release(h, *w.compute);
    }
  }
  w.compute->synchronize();
  state.counters["blocks"] = 64;
  state.SetItemsProcessed(state.iterations() * 64);
}

}  // namespace

BENCHMARK(resident)->RangeMultiplier(10)->Range(100, 1'000'000)->Unit(benchmark::kNanosecond);
BENCHMARK(evicting)->RangeMultiplier(10)->Range(100, 1'000'000)->Unit(benchmark::kNanosecond);
BENCHMARK(block_table)->Arg(0)->Arg(1)->ArgNames({"list"})->Unit(benchmark::kMicrosecond);
BENCHMARK(flat_per_call)->Iterations(1)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
