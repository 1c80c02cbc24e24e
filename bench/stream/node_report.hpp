// Printing and JSON of htp-stream-bench --gpus N.
#pragma once

#include "node_runner.hpp"

#include <nlohmann/json.hpp>

#include <vector>

namespace htp::bench {

/// The node modes side by side (the single-GPU policies' table comes before it).
void print_node_table(const std::vector<node_result>& results, double budget_ms,
                      double tail_budget_ms);
/// One mode's results as JSON.
nlohmann::json to_json(const node_result& r);

}  // namespace htp::bench
