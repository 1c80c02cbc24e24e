#include "report.hpp"

#include <cstdio>

namespace htp::bench {

double speedup_over(const std::vector<policy_result>& results, const policy_result& r,
                    const std::string& baseline) {
  for (const auto& b : results) {
    if (b.name == baseline && !b.skipped && r.step.p50 > 0) return b.step.p50 / r.step.p50;
  }
  return 0;
}

void print_table(const std::vector<policy_result>& results, const std::string& baseline,
                 double budget_ms) {
  std::printf("\n%-15s %9s %9s %7s | %8s %8s %8s %8s %7s %8s | %7s %7s %7s | %7s %7s %7s | %6s %6s "
              "| %7s %5s | %7s\n",
              "policy", "step p50", "p99", "budget", "wait p50", "p99", "ms/64MiB", "x floor",
              "faults", "f/ms", "stall", "stl p99", "hostblk", "MB/step", "xMIN", "xbound",
              "HBMpk%", "mean%", "H2DGB/s", "util", "speedup");
  for (const auto& r : results) {
    if (r.skipped) {
      std::printf("%-15s skipped: %s\n", r.name.c_str(), r.skip_reason.c_str());
      continue;
    }
    const double x_min = r.min_bytes_per_step > 0 ? r.bytes_per_step / r.min_bytes_per_step : 0;
    const double x_bound = r.bound_ms > 0 ? r.step.p50 / r.bound_ms : 0;
    std::printf("%-15s %9.2f %9.2f %7s | %8.3f %8.3f %8.3f %8.2f %7llu %8.4f | %7.2f %7.3f %6.1f%% "
                "| %7.1f %7.3f %7.3f | %6.1f %6.1f | %7.2f %5.2f | %6.2fx\n",
                r.name.c_str(), r.step.p50, r.step.p99, r.meets_budget ? "meets" : "MISSES",
                r.fault_wait.p50_ms, r.fault_wait.p99_ms, r.fault_wait.ms_per_64mib_page,
                r.fault_wait.floor_multiple_p50,
                static_cast<unsigned long long>(r.faults + r.late_prefetches), r.fault_rate_per_ms,
                r.stall_ms_per_step, r.stall.p99, 100.0 * r.host_blocked_share,
                r.bytes_per_step / 1e6, x_min, x_bound, r.hbm_peak_pct, r.hbm_mean_pct, r.h2d_gbps,
                r.link_utilization, speedup_over(results, r, baseline));
  }
  std::printf(
      "(times in ms; budget: step p99 <= %.0f ms. wait: a page fault's wait from the acquire call "
      "to the "
      "bytes being usable, late prefetches included, steady state, exact quantiles; ms/64MiB: "
      "total wait / "
      "total bytes x 64 MiB; x floor: p50 of wait / (bytes / link peak); faults: faults + late "
      "prefetches; "
      "stall: compute-stream time waiting on htp per step (device-measured); stl p99: p99 of that "
      "wait per "
      "stalled acquire, from when the stream needed the bytes; hostblk: host time blocked in "
      "acquire / step; xMIN: bytes paged in / MIN (Belady's rule for equal sizes; for unequal ones "
      "the lower bound total - capacity, so xMIN is an upper bound on the true ratio); xbound: "
      "step p50 / max(compute, MIN / link "
      "peak); speed-up: on-demand p50 / policy p50)\n",
      budget_ms);
}

namespace {
double budget_ms_of(const policy_result& r) { return r.latency_budget_ms; }
}  // namespace

nlohmann::json to_json(const policy_result& r, double speedup) {
  using nlohmann::json;
  if (r.skipped) return json{{"name", r.name}, {"skipped", true}, {"reason", r.skip_reason}};
  const auto ms = [](const summary_ms& s) {
    return json{{"p50", s.p50}, {"p99", s.p99}, {"max", s.max}, {"mean", s.mean}};
  };
  return json{
      {"name", r.name},
      {"hbm_budget_bytes", r.hbm_budget_bytes},
      {"step_ms", ms(r.step)},
      {"steps_ms", r.step_ms},
      {"meets_budget", r.meets_budget},
      {"fault_ms", ms(r.fault)},
      {"fault_wait",
       {{"count", r.fault_wait.count},
        {"p50_ms", r.fault_wait.p50_ms},
        {"p90_ms", r.fault_wait.p90_ms},
        {"p99_ms", r.fault_wait.p99_ms},
        {"max_ms", r.fault_wait.max_ms},
        {"mean_ms", r.fault_wait.mean_ms},
        {"ms_per_64mib_page", r.fault_wait.ms_per_64mib_page},
        {"floor_multiple_p50", r.fault_wait.floor_multiple_p50},
        {"floor_multiple_p99", r.fault_wait.floor_multiple_p99},
        {"within_budget", r.fault_wait.p99_ms <= budget_ms_of(r)}}},
      {"compute_stall_ms_per_step", r.stall_ms_per_step},
      {"stalled_acquires", r.stalled_acquires},
      {"stall_per_acquire_ms", ms(r.stall)},
      {"host_blocked_share", r.host_blocked_share},
      {"bytes_per_step", r.bytes_per_step},
      {"min_bytes_per_step", r.min_bytes_per_step},
      {"belady_bytes_per_step", r.belady_bytes_per_step},
      {"bytes_over_min", r.min_bytes_per_step > 0 ? r.bytes_per_step / r.min_bytes_per_step : 0},
      {"bound_ms", r.bound_ms},
      {"step_over_bound", r.bound_ms > 0 ? r.step.p50 / r.bound_ms : 0},
      {"faults", r.faults},
      {"fault_rate_per_ms", r.fault_rate_per_ms},
      {"page_ins", r.page_ins},
      {"page_in_bytes", r.page_in_bytes},
      {"prefetches", r.prefetches},
      {"prefetch_hits", r.prefetch_hits},
      {"late_prefetches", r.late_prefetches},
      {"wasted_prefetches", r.wasted_prefetches},
      {"evictions", r.evictions},
      {"write_backs", r.write_backs},
      {"hbm_peak_pct", r.hbm_peak_pct},
      {"hbm_mean_pct", r.hbm_mean_pct},
      {"h2d_gbps", r.h2d_gbps},
      {"link_utilization", r.link_utilization},
      {"compute_ms_per_step", r.compute_ms},
      {"transfer_ms_per_step", r.transfer_ms},
      {"overlap_efficiency", r.overlap_efficiency},
      {"speedup_over_on_demand", speedup},
      {"verification_mismatches", r.mismatches},
      {"pager_metrics", json::parse(r.metrics_json)},
  };
}

}  // namespace htp::bench
