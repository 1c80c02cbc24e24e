// The trade-off matrix (contract in the header).
#include "planner/matrix.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

namespace htp::bench {

std::vector<matrix_row> trade_off_matrix(const plan_inputs& in, const htp_settings& s,
                                         const std::vector<int>& batches) {
  HTP_EXPECTS(!batches.empty(), htp::invalid_argument,
              "--matrix-batches must name at least one batch size");
  for (int b : batches) {
    HTP_EXPECTS(b >= 1, htp::invalid_argument, "--matrix-batches: batch ", b,
                " must be at least 1");
  }
  struct row_kind {
    const char* name;
    placement where;
    strategy how;
    bool all_resident;
  };
  const row_kind kinds[] = {
      {"all-resident", placement::resident, strategy::tensor_parallel, true},
      {"tensor-parallel+paging", placement::resident, strategy::tensor_parallel, false},
      {"swap-and-shard", placement::resident, strategy::swap_and_shard, false},
      {"host-paging", placement::paged, strategy::tensor_parallel, false},
      {"degraded", placement::resident, strategy::degraded, false},
  };
  std::vector<matrix_row> rows;
  for (const auto& k : kinds) {
    matrix_row row{k.name, {}};
    for (int b : batches) {
      plan_inputs bi = in;
      bi.batch = b;
      htp_settings bs = s;
      bs.where = k.where;
      bs.how = k.how;
      bs.paging_window = !k.all_resident;  // all resident: nothing is paged, no window
      if (k.how == strategy::degraded) bs.compression_ratio = 1;  // no raw host copy to map
      const htp_prediction p = predict_htp(bi, bs);
      matrix_cell c;
      c.batch = b;
      c.feasible = p.feasible;
      c.why_not = p.why_not;
      if (k.all_resident && p.resident_layers < in.model.layers) {
        c.feasible = false;
        c.why_not = std::to_string(in.model.layers - p.resident_layers) + " of " +
                    std::to_string(in.model.layers) + " layers do not fit in HBM";
      }
      if (c.feasible) {
        c.step_ms = p.step_ms;
        c.tokens_per_second = p.tokens_per_second;
        c.meets_budget = p.meets_budget;
      }
      row.cells.push_back(c);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace htp::bench
