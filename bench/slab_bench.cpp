// Benchmarks of the slab allocator: allocate+release pairs, small and large, single and
// multi-threaded, next to the backend's raw allocation; and a churn trace reporting fragmentation
// over time and after compaction. Human-readable output on stdout; JSON in --json_out (Google
// Benchmark's results) and --churn_out (the trace).
#include <htp/sim_device.hpp>
#include <htp/slab_allocator.hpp>

#include "common/bench_device.hpp"

#include <benchmark/benchmark.h>
#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

htp::device& bench_device() {
  static std::unique_ptr<htp::device> dev = [] {
    htp::bench::device_options d;
    d.backend = "sim";
    d.sim_memory_bytes = 64 * GiB;  // address space only: nothing touches the slabs
    return htp::bench::make_bench_device(d);
  }();
  return *dev;
}

/// The default geometry (64 MiB slabs, 64 KiB pages); with `slab_pages`, pages as large as a slab
/// (whole-slab runs, one size class per slab: the design before pages), for comparison.
htp::slab_allocator& bench_allocator(bool slab_pages = false) {
  auto make = [](std::size_t page) {
    htp::slab_allocator_config c;
    c.t = htp::tier::hbm;
    c.budget_bytes = 8 * GiB;
    c.page_bytes = page;
    return c;
  };
  static htp::slab_allocator a(bench_device(), make(0));
  static htp::slab_allocator b(bench_device(), make(64 * MiB));
  return slab_pages ? b : a;
}

void slab_pair(benchmark::State& state) {
  auto& a = bench_allocator();
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    htp::extent e = a.allocate(n);
    benchmark::DoNotOptimize(e.ptr);
    a.deallocate(e.ptr, e.bytes);
  }
  state.SetItemsProcessed(state.iterations());
}

void raw_pair(benchmark::State& state) {
  auto& d = bench_device();
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = d.allocate(htp::memory_kind::device, n);
    benchmark::DoNotOptimize(p);
    d.deallocate(htp::memory_kind::device, p, n);
  }
  state.SetItemsProcessed(state.iterations());
}

/// Pre-drawn (slot, size) pairs, so the timed loop measures the allocator, not the random numbers.
struct draws {
  std::vector<std::pair<std::size_t, std::size_t>> v;
  std::size_t i = 0;
  template <class Size>
  draws(std::size_t live, std::uint64_t seed, Size size) {
    std::mt19937_64 rng(seed);
    for (int k = 0; k < (1 << 16); ++k) v.emplace_back(rng() % live, size(rng));
  }
  const std::pair<std::size_t, std::size_t>& next() { return v[i++ & (v.size() - 1)]; }
};

/// Keep `live` blocks per thread, replace one per iteration: a free and an allocate.
template <class Size>
void replace_loop(benchmark::State& state, std::size_t live_n, Size size) {
  auto& a = bench_allocator(state.range(0) != 0);
  draws d(live_n, 11 + static_cast<std::uint64_t>(state.thread_index()), size);
  std::vector<htp::extent> live;
  for (std::size_t i = 0; i < live_n; ++i) live.push_back(a.allocate(d.next().second));
  for (auto _ : state) {
    const auto& [k, n] = d.next();
    a.deallocate(live[k].ptr, live[k].bytes);
    live[k] = a.allocate(n);
  }
  for (auto& e : live) a.deallocate(e.ptr, e.bytes);
  state.SetItemsProcessed(state.iterations());
}

// A realistic small mix: 64 live blocks of 256 B..64 KiB per thread.
void slab_small_mix(benchmark::State& state) {
  replace_loop(state, 64,
               [](std::mt19937_64& rng) { return std::size_t{256} + rng() % (64 * 1024); });
}

// The churn trace's mix: 256 live blocks (over all threads) log-uniform in 4 KiB..48 MiB (runs of
// pages split and merge in the free index).
void slab_log_mix(benchmark::State& state) {
  replace_loop(state, 256 / static_cast<std::size_t>(state.threads()), [](std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(0, 1);
    const double lo = std::log(4096.0), hi = std::log(48.0 * MiB);
    return static_cast<std::size_t>(std::exp(lo + u(rng) * (hi - lo)));
  });
}

BENCHMARK(slab_pair)
    ->Name("slab_pair/small")
    ->Arg(256)
    ->Arg(4096)
    ->Arg(64 * 1024)
    ->Threads(1)
    ->Threads(4);
BENCHMARK(slab_pair)->Name("slab_pair/mid")->Arg(1 * MiB)->Arg(9 * MiB)->Threads(1)->Threads(4);
BENCHMARK(slab_pair)
    ->Name("slab_pair/large")
    ->Arg(64 * MiB)
    ->Arg(512 * MiB)
    ->Threads(1)
    ->Threads(4);
BENCHMARK(raw_pair)
    ->Name("raw_sim_pair/small")
    ->Arg(256)
    ->Arg(4096)
    ->Arg(64 * 1024)
    ->Threads(1)
    ->Threads(4);
BENCHMARK(raw_pair)
    ->Name("raw_sim_pair/large")
    ->Arg(64 * MiB)
    ->Arg(512 * MiB)
    ->Threads(1)
    ->Threads(4);
// Arg 0: 64 KiB pages; arg 1: pages of a whole slab (the design before pages).
BENCHMARK(slab_small_mix)->Arg(0)->Arg(1)->Threads(1)->Threads(4);
BENCHMARK(slab_log_mix)->Arg(0)->Arg(1)->Threads(1)->Threads(4);

nlohmann::json frag_json(const htp::fragmentation_report& f) {
  return {{"external", f.external},
          {"internal", f.internal},
          {"combined", f.combined},
          {"waste", f.waste},
          {"largest_free_extent_bytes", f.largest_free_extent_bytes},
          {"free_pages", f.free_pages}};
}

/// Live allocations of the churn trace, findable by address (compaction re-points them).
struct live_set {
  std::vector<htp::extent> v;
  std::unordered_map<void*, std::size_t> at;
  void add(const htp::extent& e) {
    at[e.ptr] = v.size();
    v.push_back(e);
  }
  void remove(std::size_t k) {
    at.erase(v[k].ptr);
    if (k + 1 != v.size()) {
      v[k] = v.back();
      at[v[k].ptr] = k;
    }
    v.pop_back();
  }
  void moved(const htp::slab_move& m) {
    const std::size_t k = at.at(m.from.ptr);
    at.erase(m.from.ptr);
    v[k].ptr = m.to.ptr;
    at[m.to.ptr] = k;
  }
};

/// Plans and commits (the trace measures placement: no bytes are copied); returns moves.
std::size_t compact(htp::slab_allocator& a, live_set& live, std::size_t request,
                    std::size_t& copied) {
  auto plan = a.plan_compaction([](const htp::extent&) { return true; }, request);
  for (const auto& m : plan.moves) {
    a.commit_move(m);
    live.moved(m);
  }
  copied += plan.bytes_to_copy;
  return plan.moves.size();
}

/// The churn trace: sizes log-uniform in [4 KiB, 48 MiB], allocations and random frees keeping the
/// tier near full, fragmentation sampled over time, then compaction (all allocations movable).
/// A request that fails while the free bytes would hold it gets a compaction for that request
/// (up to four rounds) and a retry, as the pager's out-of-memory ladder does.
nlohmann::json churn(std::size_t ops, std::size_t budget, std::size_t page_bytes,
                     std::uint64_t seed) {
  htp::bench::device_options d;
  d.backend = "sim";
  d.sim_memory_bytes = budget + GiB;
  auto dev = htp::bench::make_bench_device(d);
  htp::slab_allocator_config c;
  c.budget_bytes = budget;
  c.page_bytes = page_bytes;
  htp::slab_allocator a(*dev, c);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const double lo = std::log(4096.0), hi = std::log(48.0 * MiB);
  live_set live;
  nlohmann::json samples = nlohmann::json::array();
  std::size_t requests = 0, failed_full = 0, failed_with_room = 0, rescued = 0, rescue_moves = 0,
              rescue_bytes = 0;
  fmt::print(
      "\nchurn trace: {} ops, budget {} GiB, slabs of {} MiB, pages of {} KiB, sizes 4 KiB..48 MiB "
      "log-uniform\n",
      ops, budget / GiB, c.slab_bytes / MiB, a.page_bytes() / 1024);
  fmt::print("{:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "op", "live", "used%", "external",
             "internal", "combined", "waste");
  for (std::size_t i = 1; i <= ops; ++i) {
    // Fill towards 85% of the tier, then churn around it.
    const double used_now = double(a.statistics().bytes_in_use) / double(budget);
    const bool alloc = live.v.empty() || u(rng) < (used_now < 0.85 ? 0.7 : 0.45);
    bool freed = !alloc;
    if (alloc) {
      const auto n = static_cast<std::size_t>(std::exp(lo + u(rng) * (hi - lo)));
      ++requests;
      bool ok = false;
      for (int round = 0; round <= 4 && !ok; ++round) {
        try {
          live.add(a.allocate(n));
          ok = true;
          if (round > 0) ++rescued;
        } catch (const htp::out_of_memory&) {
          const auto f = a.fragmentation();
          if (f.free_pages * a.page_bytes() < a.rounded_size(n)) break;  // no room at all
          if (round == 4) break;
          const std::size_t m = compact(a, live, n, rescue_bytes);
          rescue_moves += m;
          if (m == 0) break;
        }
      }
      if (!ok) {
        const auto f = a.fragmentation();
        (f.free_pages * a.page_bytes() < a.rounded_size(n) ? failed_full : failed_with_room) += 1;
        freed = true;
      }
    }
    if (freed && !live.v.empty()) {
      const std::size_t k = rng() % live.v.size();
      a.deallocate(live.v[k].ptr, live.v[k].bytes);
      live.remove(k);
    }
    if (i % (ops / 10) == 0) {
      const auto st = a.statistics();
      const auto& f = st.fragmentation;
      const double used = double(st.bytes_in_use) / double(a.capacity_bytes());
      fmt::print("{:8} {:10} {:8.1f}% {:8.1f}% {:8.1f}% {:8.1f}% {:8.1f}%\n", i, live.v.size(),
                 used * 100, f.external * 100, f.internal * 100, f.combined * 100, f.waste * 100);
      auto j = frag_json(f);
      j["op"] = i;
      j["live"] = live.v.size();
      j["bytes_in_use"] = st.bytes_in_use;
      samples.push_back(j);
    }
  }
  const auto before = a.fragmentation();
  std::size_t moves = 0, copied = 0, rounds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (; rounds < 64; ++rounds) {  // plans until one moves nothing
    const std::size_t m = compact(a, live, 0, copied);
    if (m == 0) break;
    moves += m;
  }
  const double plan_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  a.audit();
  const auto after = a.fragmentation();
  const auto st = a.statistics();
  fmt::print(
      "before compaction: external {:.1f}% internal {:.1f}% combined {:.1f}% waste {:.1f}%\n",
      before.external * 100, before.internal * 100, before.combined * 100, before.waste * 100);
  fmt::print("after compaction:  external {:.1f}% internal {:.1f}% combined {:.1f}% waste {:.1f}% "
             "({} rounds, {} moves, {:.2f} GiB to copy, plan+commit {:.3f} s)\n",
             after.external * 100, after.internal * 100, after.combined * 100, after.waste * 100,
             rounds, moves, double(copied) / double(GiB), plan_s);
  fmt::print(
      "requests {}: {} failed with no room (free bytes < request), {} failed with room after "
      "compaction, {} served after a compaction ({} moves)\n",
      requests, failed_full, failed_with_room, rescued, rescue_moves);
  for (auto& e : live.v) a.deallocate(e.ptr, e.bytes);
  return {{"ops", ops},
          {"budget_bytes", budget},
          {"slab_bytes", c.slab_bytes},
          {"page_bytes", a.page_bytes()},
          {"seed", seed},
          {"requests", requests},
          {"failed_no_room", failed_full},
          {"failed_with_room", failed_with_room},
          {"served_after_compaction", rescued},
          {"compaction_moves_for_requests", rescue_moves},
          {"bytes_in_use_at_end", st.bytes_in_use},
          {"samples", samples},
          {"before_compaction", frag_json(before)},
          {"after_compaction", frag_json(after)},
          {"compaction_rounds", rounds},
          {"moves", moves},
          {"bytes_to_copy", copied},
          {"plan_and_commit_seconds", plan_s}};
}

/// htp-slab-bench's options, with their defaults; `rest` holds the flags for Google Benchmark.
struct options {
  std::string json_out = "slab_bench.json";
  std::string churn_out = "slab_churn.json";
  unsigned long churn_ops = 100000;
  unsigned long churn_gib = 16;
  std::vector<std::string> rest;
};

/// Parses argv into `o`, the flags it does not know into o.rest. Returns -1 to go on, or the exit
/// code to return now (0 after --help, which prints this tool's flags, then Google Benchmark's;
/// non-zero for a bad command line, which it has reported).
int parse_options(int argc, char** argv, options& o) {
  CLI::App app{"htp-slab-bench: the slab allocator's Google Benchmark cases, then a churn trace. "
               "Flags it does not know (--benchmark_*) go to Google Benchmark."};
  app.add_option("--json_out", o.json_out,
                 "Google Benchmark's JSON (relative: the working directory)")
      ->capture_default_str();
  app.add_option("--churn_out", o.churn_out, "the churn trace's JSON")->capture_default_str();
  app.add_option("--churn_ops", o.churn_ops, "operations of the churn trace (0: none)")
      ->capture_default_str();
  app.add_option("--churn_budget_gib", o.churn_gib, "the churn trace's budget, GiB")
      ->capture_default_str();
  app.allow_extras();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      fmt::print("{}\n", app.help());  // this tool's flags, then Google Benchmark's (it exits)
      std::string help = "--help";
      char* bench_args[] = {argv[0], help.data()};
      int n = 2;
      benchmark::Initialize(&n, bench_args);
      return 0;
    }
  }
  CLI11_PARSE(app, argc, argv);
  o.rest = app.remaining();
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;
  const std::string& json_out = o.json_out;
  const std::string& churn_out = o.churn_out;
  const unsigned long churn_ops = o.churn_ops, churn_gib = o.churn_gib;
  std::vector<std::string>& rest = o.rest;
  std::vector<char*> args{argv[0]};
  for (auto& a : rest) args.push_back(a.data());
  std::string out_flag = "--benchmark_out=" + json_out;
  std::string fmt_flag = "--benchmark_out_format=json";
  args.push_back(out_flag.data());
  args.push_back(fmt_flag.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (churn_ops > 0) {
    // Side by side: pages as large as a slab (whole-slab runs and one class per slab, the design
    // before pages) and the default 64 KiB pages.
    nlohmann::json j;
    j["slab_pages"] = churn(churn_ops, churn_gib * GiB, 64 * MiB, 7);
    j["pages"] = churn(churn_ops, churn_gib * GiB, 0, 7);
    std::ofstream(churn_out) << j.dump(2) << "\n";
    fmt::print("JSON: {} and {}\n", json_out, churn_out);
  }
  return 0;
}
