// Printing and JSON of the streaming benchmark's results.
#pragma once

#include "runner.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace htp::bench {

/// --compress: the raw and compressed runs side by side: logical and wire bytes per step, step
/// p50 against the bound from wire bytes, decode time and the effective logical rate. Never throws
/// (printf).
void print_compression_table(const std::vector<policy_result>& results);

/// The side-by-side table of policies, with speed-ups over `baseline` (by name).
void print_table(const std::vector<policy_result>& results, const std::string& baseline,
                 double budget_ms);

/// One policy's results as JSON (step_ms, fault_ms, counters, the pager's metrics).
nlohmann::json to_json(const policy_result& r, double speedup);

/// A summary as {"p50", "p99", "max", "mean"} (ms).
nlohmann::json to_json(const summary_ms& s);

/// Speed-up of `r` over the policy named `baseline` (p50 step time ratio; 0 if unknown).
double speedup_over(const std::vector<policy_result>& results, const policy_result& r,
                    const std::string& baseline);

/// The step / bound rows of every run (one JSON per model, as htp-stream-bench writes it): per
/// model, budget, granularity and paging policy with a bound, step p50, bound_ms, step_over_bound,
/// prefetch_timely_share and prefetch lateness p50 / p99.
nlohmann::json bound_rows(const nlohmann::json& runs);

/// Prints bound_rows side by side: per model, budget and granularity, schedule-k2 (count mode)
/// beside schedule-auto (automatic), when both ran; every row otherwise.
void print_bound_table(const nlohmann::json& rows);

}  // namespace htp::bench
