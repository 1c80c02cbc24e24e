// Printing and JSON of the streaming benchmark's results.
#pragma once

#include "runner.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace htp::bench {

/// The side-by-side table of policies, with speed-ups over `baseline` (by name).
void print_table(const std::vector<policy_result>& results, const std::string& baseline,
                 double budget_ms);

/// One policy's results as JSON (step_ms, fault_ms, counters, the pager's metrics).
nlohmann::json to_json(const policy_result& r, double speedup);

/// Speed-up of `r` over the policy named `baseline` (p50 step time ratio; 0 if unknown).
double speedup_over(const std::vector<policy_result>& results, const policy_result& r,
                    const std::string& baseline);

}  // namespace htp::bench
