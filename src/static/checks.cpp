// The checks every static plan's input passes (plan_internal.hpp).
#include "plan_internal.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

namespace htp::static_detail {

std::vector<bool> referenced(const static_plan_input& in) {
  std::vector<bool> out(in.tensors.size(), false);
  for (const auto& p : in.positions) {
    for (const std::size_t t : p.tensors) out[t] = true;
  }
  return out;
}

void check_input(const static_plan_input& in) {
  HTP_EXPECTS(in.link_bytes_per_second > 0, invalid_argument,
              "static plan: link_bytes_per_second must be positive (the H2D rate a step may use)");
  HTP_EXPECTS(in.copy_overhead_ns >= 0, invalid_argument,
              "static plan: copy_overhead_ns must not be negative");
  for (std::size_t p = 0; p < in.positions.size(); ++p) {
    const auto& pos = in.positions[p];
    HTP_EXPECTS(pos.compute_ns >= 0, invalid_argument, "static plan: position ", p,
                " has a negative compute time (", pos.compute_ns, " ns)");
    for (const std::size_t t : pos.tensors) {
      HTP_EXPECTS(t < in.tensors.size(), invalid_argument, "static plan: position ", p,
                  " reads tensor ", t, ", but there are only ", in.tensors.size());
      const auto& ten = in.tensors[t];
      HTP_EXPECTS(!ten.routed, invalid_argument, "static plan: tensor '", ten.name,
                  "' is routed (the positions that read it are chosen at run time), and a static "
                  "plan fixes every load ahead of the step. Plan the dense segments between the "
                  "routers separately (one static plan each, docs/pager.md), or keep the routed "
                  "tensors out of the static step and page them dynamically");
      HTP_EXPECTS(ten.bytes > 0, invalid_argument, "static plan: tensor '", ten.name,
                  "' has no bytes");
      HTP_EXPECTS(!ten.coded() || in.decode_bytes_per_second > 0, invalid_argument,
                  "static plan: tensor '", ten.name,
                  "' is coded, so decode_bytes_per_second must be positive");
    }
  }
}

}  // namespace htp::static_detail
