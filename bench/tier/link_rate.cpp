// The rate error of a link cell shared by N processes, next to an in-process shared link shared by
// N threads: greedy takers of one chunk at a time over the same window; the error is how far the
// bytes that crossed, less the burst the link starts with, are from rate x window.
#include "tier/tier_bench.hpp"

#include <htp/shared_link.hpp>
#include <htp/shared_tier.hpp>
#include <htp/token_bucket.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

namespace htp::bench::tier {

namespace {
constexpr std::uint64_t rate = 4'000'000'000;  // 4 GB/s
constexpr std::size_t chunks_of_burst = 8;

void sleep_ns(std::int64_t ns) {
  if (ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(ns));  // a paced taker's wait
}

/// Takes `chunk` at a time from `link` between t0 and t1 as fast as it lets; returns the bytes.
std::uint64_t greedy(shared_link& link, std::size_t chunk, std::int64_t t0, std::int64_t t1) {
  sleep_ns(t0 - token_bucket::steady_clock_ns());
  shared_link::waiter w;
  std::uint64_t bytes = 0;
  for (;;) {
    const std::int64_t now = token_bucket::steady_clock_ns();
    if (now >= t1) break;
    const std::int64_t wait = link.take_or_wait(chunk, transfer_priority::prefetch, w);
    if (wait == 0) {
      bytes += chunk;
      continue;
    }
    sleep_ns(std::min(wait, t1 - now));
  }
  link.withdraw(w);
  return bytes;
}

double error_of(std::uint64_t bytes, std::uint64_t burst, double seconds) {
  return (static_cast<double>(bytes) - static_cast<double>(burst)) /
             (static_cast<double>(rate) * seconds) -
         1.0;
}

std::int64_t window_ns(const options& o) { return static_cast<std::int64_t>(o.link_seconds * 1e9); }

/// N threads of this process over one in-process shared link.
nlohmann::json threads_run(const options& o) {
  const std::uint64_t burst = chunks_of_burst * o.chunk_bytes;
  shared_link link("threads", rate, burst);
  const std::int64_t t0 = token_bucket::steady_clock_ns() + 100'000'000, t1 = t0 + window_ns(o);
  std::vector<std::uint64_t> got(static_cast<std::size_t>(o.processes), 0);
  std::vector<std::thread> ts;
  for (std::size_t i = 0; i < got.size(); ++i)
    ts.emplace_back([&, i] { got[i] = greedy(link, o.chunk_bytes, t0, t1); });
  for (auto& t : ts) t.join();
  std::uint64_t total = 0;
  for (auto b : got) total += b;
  return {{"takers", o.processes},
          {"bytes", total},
          {"split", got},
          {"rate_error", error_of(total, burst, o.link_seconds)}};
}

/// N ranks over the tier's link cell: spawns them, each takes from t0 to t1.
nlohmann::json processes_run(options o) {
  const std::uint64_t burst = chunks_of_burst * o.chunk_bytes;
  auto tier = shared_tier::open(tier_config(o));
  tier->link("rate", rate, burst);                             // made before any rank takes from it
  o.start_ns = token_bucket::steady_clock_ns() + 500'000'000;  // after every rank has started
  std::vector<int> pids;
  for (int r = 0; r < o.processes; ++r) pids.push_back(spawn_self(child_arguments(o, r)));
  const auto status =
      wait_all(pids, token_bucket::steady_clock_ns() + static_cast<std::int64_t>(o.timeout_s * 1e9),
               nullptr);
  std::uint64_t total = 0;
  std::vector<std::uint64_t> split;
  for (int r = 0; r < o.processes; ++r) {
    if (status[static_cast<std::size_t>(r)] != 0) return {{"error", "rank failed"}};
    split.push_back(read_json(o.dir + "/rank-" + std::to_string(r) + ".json")["bytes"]);
    total += split.back();
  }
  return {{"takers", o.processes},
          {"bytes", total},
          {"split", split},
          {"rate_error", error_of(total, burst, o.link_seconds)}};
}
}  // namespace

int run_link_rate(const options& o) {
  if (o.child >= 0) {  // a rank: its share of the window
    auto tier = shared_tier::open(tier_config(o));
    auto link = tier->link("rate", rate, chunks_of_burst * o.chunk_bytes);
    const std::uint64_t bytes = greedy(*link, o.chunk_bytes, o.start_ns, o.start_ns + window_ns(o));
    write_json({{"bytes", bytes}}, o.dir + "/rank-" + std::to_string(o.child) + ".json");
    return 0;
  }
  const nlohmann::json threads = threads_run(o), procs = processes_run(o);
  write_json({{"bench", "htp-tier-bench --link-rate"},
              {"rate_bytes_per_second", rate},
              {"burst_bytes", chunks_of_burst * o.chunk_bytes},
              {"seconds", o.link_seconds},
              {"chunk_bytes", o.chunk_bytes},
              {"in_process_threads", threads},
              {"processes", procs}},
             o.out);
  return procs.contains("error") ? 1 : 0;
}

}  // namespace htp::bench::tier
