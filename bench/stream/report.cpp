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
  std::printf("\n%-15s %9s %9s %9s %7s | %8s %8s %8s %7s %8s | %6s %6s | %7s %5s %7s | %7s\n",
              "policy", "step p50", "p99", "max", "budget", "fault50", "p99", "max", "faults",
              "f/ms", "HBMpk%", "mean%", "H2DGB/s", "util", "overlap", "speedup");
  for (const auto& r : results) {
    if (r.skipped) {
      std::printf("%-15s skipped: %s\n", r.name.c_str(), r.skip_reason.c_str());
      continue;
    }
    std::printf("%-15s %9.2f %9.2f %9.2f %7s | %8.3f %8.3f %8.3f %7llu %8.4f | %6.1f %6.1f | %7.2f %5.2f %7.2f | %6.2fx\n",
                r.name.c_str(), r.step.p50, r.step.p99, r.step.max,
                r.meets_budget ? "meets" : "MISSES", r.fault.p50, r.fault.p99, r.fault.max,
                static_cast<unsigned long long>(r.faults), r.fault_rate_per_ms, r.hbm_peak_pct,
                r.hbm_mean_pct, r.h2d_gbps, r.link_utilization, r.overlap_efficiency,
                speedup_over(results, r, baseline));
  }
  std::printf("(times in ms; budget: step p99 <= %.0f ms; overlap = max(compute, transfer) / step time; "
              "speed-up: on-demand p50 / policy p50)\n",
              budget_ms);
}

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
