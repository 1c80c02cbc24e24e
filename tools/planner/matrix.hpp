// The trade-off matrix (htp-plan --matrix): strategies for serving a model on a node against batch
// sizes, each cell the step latency and tokens per second htp's model predicts, against the
// latency budget. Strategies: all layers resident (where they fit), tensor parallel with paging,
// swap-and-shard, host paging only (no resident layers) and degraded (paged layers read in place
// from host memory). docs/planner.md, "The trade-off matrix".
#pragma once

#include "planner/htp_model.hpp"

#include <string>
#include <vector>

namespace htp::bench {

struct matrix_cell {
  int batch = 0;
  bool feasible = false;
  std::string why_not;  ///< when not feasible
  double step_ms = 0;
  double tokens_per_second = 0;
  bool meets_budget = false;
};

struct matrix_row {
  std::string strategy;            ///< "all-resident", "tensor-parallel+paging", "swap-and-shard",
                                   ///< "host-paging", "degraded"
  std::vector<matrix_cell> cells;  ///< one per batch, in the order asked
};

/// The matrix for `in` (its batch is replaced by each of `batches`) under `s` (its placement and
/// strategy are set per row). Throws htp::invalid_argument for an empty or non-positive batch list.
std::vector<matrix_row> trade_off_matrix(const plan_inputs& in, const htp_settings& s,
                                         const std::vector<int>& batches);

}  // namespace htp::bench
