#include "report.hpp"

#include "common/pager_counters.hpp"

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
                static_cast<unsigned long long>(r.counters.faults + r.counters.late_prefetches),
                r.fault_rate_per_ms, r.stall_ms_per_step, r.stall.p99, 100.0 * r.host_blocked_share,
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
      "step p50 / max(compute, Belady's bytes on the realised access sequence / link peak); "
      "speed-up: on-demand p50 / policy p50)\n",
      budget_ms);
}

void print_compression_table(const std::vector<policy_result>& results) {
  std::printf("\n%-17s %10s %10s %9s %9s %9s %9s %9s %8s\n", "policy", "MB/step", "wire MB",
              "step p50", "bound", "step/bnd", "decode", "logGB/s", "xMIN");
  for (const auto& r : results) {
    if (r.skipped) continue;
    std::printf("%-17s %10.1f %10.1f %9.2f %9.2f %9.2f %9.2f %9.2f %8.3f\n", r.name.c_str(),
                r.bytes_per_step / 1e6, r.wire_bytes_per_step / 1e6, r.step.p50, r.wire_bound_ms,
                r.wire_bound_ms > 0 ? r.step.p50 / r.wire_bound_ms : 0, r.decode_ms_per_step,
                r.effective_logical_gbps,
                r.min_bytes_per_step > 0 ? r.bytes_per_step / r.min_bytes_per_step : 0);
  }
  std::printf("(+z: weights stored compressed. MB/step: logical bytes paged in; wire MB: bytes on "
              "the link; bound: max(compute, MIN's bytes x wire ratio / link peak); decode: device "
              "time of the decodes per step; logGB/s: decoded bytes / decode-path busy time)\n");
}

namespace {
double budget_ms_of(const policy_result& r) { return r.latency_budget_ms; }
}  // namespace

nlohmann::json to_json(const summary_ms& s) {
  return {{"p50", s.p50}, {"p99", s.p99}, {"max", s.max}, {"mean", s.mean}};
}

nlohmann::json to_json(const policy_result& r, double speedup) {
  using nlohmann::json;
  if (r.skipped) return json{{"name", r.name}, {"skipped", true}, {"reason", r.skip_reason}};
  const auto ms = [](const summary_ms& s) { return to_json(s); };
  json j{
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
      {"bound_lower_ms", r.bound_lower_ms},
      {"compressed", r.compressed},
      {"wire_bytes_per_step", r.wire_bytes_per_step},
      {"wire_ratio", r.wire_ratio},
      {"wire_bound_ms", r.wire_bound_ms},
      {"step_over_wire_bound", r.wire_bound_ms > 0 ? r.step.p50 / r.wire_bound_ms : 0},
      {"decode_ms_per_step", r.decode_ms_per_step},
      {"effective_logical_gbps", r.effective_logical_gbps},
      {"step_over_lower_bound", r.bound_lower_ms > 0 ? r.step.p50 / r.bound_lower_ms : 0},
      {"granularity", r.granularity},
      {"lookahead", r.lookahead},
      {"prefetch_timely_share", r.prefetch_timely_share},
      {"prefetch_lateness",
       {{"count", r.prefetch_lateness_count},
        {"p50_ms", r.prefetch_lateness.p50},
        {"p99_ms", r.prefetch_lateness.p99},
        {"max_ms", r.prefetch_lateness.max},
        {"mean_ms", r.prefetch_lateness.mean}}},
      {"fault_rate_per_ms", r.fault_rate_per_ms},
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
  // The timed steps' counters, under their names in HTP_PAGER_COUNTERS.
  add_pager_counters(j, r.counters,
                     {"faults", "page_ins", "page_in_bytes", "prefetches", "prefetch_hits",
                      "late_prefetches", "wasted_prefetches", "evictions", "write_backs"});
  return j;
}

nlohmann::json bound_rows(const nlohmann::json& runs) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& run : runs) {
    if (!run.contains("sweep")) continue;
    for (const auto& entry : run["sweep"]) {
      for (const auto& p : entry["policies"]) {
        if (p.value("skipped", false) || p.value("bound_ms", 0.0) <= 0) continue;
        if (p["name"] == "all-resident") continue;
        rows.push_back({{"model", run["model"]["name"]},
                        {"layers_run", run["model"]["layers_run"]},
                        {"budget_fraction", entry.value("budget_fraction", 0.0)},
                        {"hbm_budget_bytes", entry["hbm_budget_bytes"]},
                        {"granularity", entry.value("granularity", "module")},
                        {"policy", p["name"]},
                        {"lookahead", p["lookahead"]},
                        {"step_p50_ms", p["step_ms"]["p50"]},
                        {"compute_ms", p["compute_ms_per_step"]},
                        {"belady_bytes_per_step", p["belady_bytes_per_step"]},
                        {"bound_ms", p["bound_ms"]},
                        {"step_over_bound", p["step_over_bound"]},
                        {"step_over_lower_bound", p["step_over_lower_bound"]},
                        {"prefetch_timely_share", p["prefetch_timely_share"]},
                        {"prefetch_lateness_p50_ms", p["prefetch_lateness"]["p50_ms"]},
                        {"prefetch_lateness_p99_ms", p["prefetch_lateness"]["p99_ms"]}});
      }
    }
  }
  return rows;
}

void print_bound_table(const nlohmann::json& rows) {
  if (rows.empty()) return;
  std::printf("\nstep p50 against max(compute, Belady bytes / link), count mode (schedule-k2) "
              "beside automatic (schedule-auto); goal: automatic <= 1.05x\n");
  std::printf("%-20s %6s %-6s %-15s %9s %9s %8s %7s %8s %8s\n", "model", "budget", "gran", "policy",
              "step p50", "bound", "x bound", "timely", "late p50", "late p99");
  for (const auto& r : rows) {
    std::printf(
        "%-20s %5.0f%% %-6s %-15s %9.1f %9.1f %8.3f %6.1f%% %8.2f %8.2f\n",
        r["model"].get<std::string>().c_str(), 100.0 * r["budget_fraction"].get<double>(),
        r["granularity"].get<std::string>().c_str(), r["policy"].get<std::string>().c_str(),
        r["step_p50_ms"].get<double>(), r["bound_ms"].get<double>(),
        r["step_over_bound"].get<double>(), 100.0 * r["prefetch_timely_share"].get<double>(),
        r["prefetch_lateness_p50_ms"].get<double>(), r["prefetch_lateness_p99_ms"].get<double>());
  }
}

}  // namespace htp::bench
