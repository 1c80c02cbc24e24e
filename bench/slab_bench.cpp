// Benchmarks of the slab allocator (issue 3): allocate+release pairs, small and large, single and
// multi-threaded, next to the backend's raw allocation; and a churn trace reporting fragmentation
// over time and after compaction. Human-readable output on stdout; JSON in --json_out (Google
// Benchmark's results) and --churn_out (the trace).
#include <htp/sim_device.hpp>
#include <htp/slab_allocator.hpp>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

htp::device& bench_device() {
  static std::unique_ptr<htp::device> dev = [] {
    htp::sim_config c;
    c.device_memory_bytes = 64 * GiB;  // address space only: nothing touches the slabs
    c.poison_byte = -1;
    return htp::make_sim_device(c);
  }();
  return *dev;
}

htp::slab_allocator& bench_allocator() {
  static htp::slab_allocator a(bench_device(), [] {
    htp::slab_allocator_config c;
    c.t = htp::tier::hbm;
    c.budget_bytes = 8 * GiB;
    return c;
  }());
  return a;
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

// A realistic mix: keep 64 small blocks live per thread, replace one per iteration.
void slab_small_mix(benchmark::State& state) {
  auto& a = bench_allocator();
  std::mt19937 rng(static_cast<unsigned>(state.thread_index()));
  std::vector<htp::extent> live;
  for (int i = 0; i < 64; ++i) live.push_back(a.allocate(256 + rng() % (64 * 1024)));
  for (auto _ : state) {
    const std::size_t k = rng() % live.size();
    a.deallocate(live[k].ptr, live[k].bytes);
    live[k] = a.allocate(256 + rng() % (64 * 1024));
  }
  for (auto& e : live) a.deallocate(e.ptr, e.bytes);
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(slab_pair)->Name("slab_pair/small")->Arg(256)->Arg(4096)->Arg(64 * 1024)->Threads(1)->Threads(4);
BENCHMARK(slab_pair)->Name("slab_pair/large")->Arg(64 * MiB)->Arg(512 * MiB)->Threads(1)->Threads(4);
BENCHMARK(raw_pair)->Name("raw_sim_pair/small")->Arg(256)->Arg(4096)->Arg(64 * 1024)->Threads(1)->Threads(4);
BENCHMARK(raw_pair)->Name("raw_sim_pair/large")->Arg(64 * MiB)->Arg(512 * MiB)->Threads(1)->Threads(4);
BENCHMARK(slab_small_mix)->Threads(1)->Threads(4);

nlohmann::json frag_json(const htp::fragmentation_report& f) {
  return {{"external", f.external},
          {"internal", f.internal},
          {"combined", f.combined},
          {"largest_free_extent_bytes", f.largest_free_extent_bytes},
          {"free_slabs", f.free_slabs}};
}

/// The churn trace: sizes log-uniform in [4 KiB, 48 MiB], allocations and random frees keeping the
/// tier near full, fragmentation sampled over time, then compaction (all allocations movable).
nlohmann::json churn(std::size_t ops, std::size_t budget, std::uint64_t seed) {
  htp::sim_config sc;
  sc.device_memory_bytes = budget + GiB;
  sc.poison_byte = -1;
  auto dev = htp::make_sim_device(sc);
  htp::slab_allocator_config c;
  c.budget_bytes = budget;
  htp::slab_allocator a(*dev, c);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const double lo = std::log(4096.0), hi = std::log(48.0 * MiB);
  std::vector<htp::extent> live;
  nlohmann::json samples = nlohmann::json::array();
  std::size_t failed = 0;
  std::printf("\nchurn trace: %zu ops, budget %zu GiB, slabs of %zu MiB, sizes 4 KiB..48 MiB log-uniform\n",
              ops, budget / GiB, c.slab_bytes / MiB);
  std::printf("%8s %10s %9s %9s %9s %9s\n", "op", "live", "used%", "external", "internal", "combined");
  for (std::size_t i = 1; i <= ops; ++i) {
    // Fill towards 85% of the tier, then churn around it.
    const double used_now = double(a.statistics().bytes_in_use) / double(budget);
    const bool alloc = live.empty() || u(rng) < (used_now < 0.85 ? 0.7 : 0.45);
    bool freed = !alloc;
    if (alloc) {
      const auto n = static_cast<std::size_t>(std::exp(lo + u(rng) * (hi - lo)));
      try {
        live.push_back(a.allocate(n));
      } catch (const htp::out_of_memory&) {
        ++failed;
        freed = true;
      }
    }
    if (freed && !live.empty()) {
      const std::size_t k = rng() % live.size();
      a.deallocate(live[k].ptr, live[k].bytes);
      live[k] = live.back();
      live.pop_back();
    }
    if (i % (ops / 10) == 0) {
      const auto st = a.statistics();
      const auto& f = st.fragmentation;
      const double used = double(st.bytes_in_use) / double(a.capacity_bytes());
      std::printf("%8zu %10zu %8.1f%% %8.1f%% %8.1f%% %8.1f%%\n", i, live.size(), used * 100,
                  f.external * 100, f.internal * 100, f.combined * 100);
      auto j = frag_json(f);
      j["op"] = i;
      j["live"] = live.size();
      j["bytes_in_use"] = st.bytes_in_use;
      samples.push_back(j);
    }
  }
  const auto before = a.fragmentation();
  std::size_t moves = 0, copied = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < 4; ++round) {
    auto plan = a.plan_compaction([](const htp::extent&) { return true; });
    if (plan.moves.empty()) break;
    for (const auto& m : plan.moves) {
      a.commit_move(m);  // the trace measures planning: the bytes themselves are not copied
      for (auto& e : live) {
        if (e.ptr == m.from.ptr) e.ptr = m.to.ptr;
      }
    }
    moves += plan.moves.size();
    copied += plan.bytes_to_copy;
  }
  const double plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  a.audit();
  const auto after = a.fragmentation();
  std::printf("before compaction: external %.1f%% internal %.1f%% combined %.1f%%\n",
              before.external * 100, before.internal * 100, before.combined * 100);
  std::printf("after compaction:  external %.1f%% internal %.1f%% combined %.1f%% (%zu moves, %.2f GiB to copy, plan+commit %.3f s)\n",
              after.external * 100, after.internal * 100, after.combined * 100, moves,
              double(copied) / double(GiB), plan_s);
  std::printf("failed requests: %zu of %zu ops\n", failed, ops);
  for (auto& e : live) a.deallocate(e.ptr, e.bytes);
  return {{"ops", ops},
          {"budget_bytes", budget},
          {"slab_bytes", c.slab_bytes},
          {"seed", seed},
          {"failed_requests", failed},
          {"samples", samples},
          {"before_compaction", frag_json(before)},
          {"after_compaction", frag_json(after)},
          {"moves", moves},
          {"bytes_to_copy", copied},
          {"plan_and_commit_seconds", plan_s}};
}

std::string take_flag(int& argc, char** argv, const std::string& name, std::string fallback) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(name + "=", 0) == 0) {
      fallback = a.substr(name.size() + 1);
      for (int k = i; k + 1 < argc; ++k) argv[k] = argv[k + 1];
      --argc;
      break;
    }
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help") {  // this tool's flags, then Google Benchmark's
      std::printf("htp-slab-bench [--json_out=FILE (slab_bench.json)] [--churn_out=FILE (slab_churn.json)]\n"
                  "               [--churn_ops=N (100000)] [--churn_budget_gib=N (16)] [benchmark flags]\n"
                  "JSON goes to the two files named (relative paths: the working directory).\n");
    }
  }
  const std::string json_out = take_flag(argc, argv, "--json_out", "slab_bench.json");
  const std::string churn_out = take_flag(argc, argv, "--churn_out", "slab_churn.json");
  const auto churn_ops = std::stoul(take_flag(argc, argv, "--churn_ops", "100000"));
  const auto churn_gib = std::stoul(take_flag(argc, argv, "--churn_budget_gib", "16"));
  std::vector<char*> args(argv, argv + argc);
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
    const auto j = churn(churn_ops, churn_gib * GiB, 7);
    std::ofstream(churn_out) << j.dump(2) << "\n";
    std::printf("JSON: %s and %s\n", json_out.c_str(), churn_out.c_str());
  }
  return 0;
}
