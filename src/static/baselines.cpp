// round_robin_plan: the k-slot scheme engines run today, as a static plan (a baseline).
#include "plan_internal.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <algorithm>
#include <map>

namespace htp {

static_plan round_robin_plan(const static_plan_input& in, std::size_t k) {
  static_detail::check_input(in);
  HTP_EXPECTS(k >= 1, invalid_argument, "round_robin_plan: k must be at least 1");
  // The layers: positions shaped as the most common position (their tensors' sizes, sorted).
  std::map<std::vector<std::size_t>, std::size_t> count;
  std::vector<std::vector<std::size_t>> shape_of(in.positions.size());
  for (std::size_t p = 0; p < in.positions.size(); ++p) {
    for (const std::size_t t : in.positions[p].tensors) shape_of[p].push_back(in.tensors[t].bytes);
    std::sort(shape_of[p].begin(), shape_of[p].end());
    ++count[shape_of[p]];
  }
  const auto common = std::max_element(count.begin(), count.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
  std::vector<std::size_t> layers;
  for (std::size_t p = 0; p < in.positions.size(); ++p) {
    if (common != count.end() && shape_of[p] == common->first) layers.push_back(p);
  }
  const auto referenced = static_detail::referenced(in);
  // Stream the last layers, as few as fit: layers[r ..] for the largest r that fits, through a
  // ring of k layers (k slots).
  std::size_t layer_bytes = 0;
  if (!layers.empty()) {
    for (const std::size_t t : in.positions[layers[0]].tensors) {
      layer_bytes += (in.tensors[t].bytes + 255) / 256 * 256;
    }
  }
  static_plan plan;
  for (std::size_t r = layers.size() + 1; r-- > 0;) {
    static_shape shape{std::vector<bool>(in.tensors.size(), true), k * layer_bytes};
    for (std::size_t i = r; i < layers.size(); ++i) {
      for (const std::size_t t : in.positions[layers[i]].tensors) shape.resident[t] = false;
    }
    if (static_detail::build(in, shape, referenced, plan)) return plan;
  }
  throw out_of_memory(detail::concat("round_robin_plan: even with all ", layers.size(),
                                     " layers streamed through ", k, " slots the arena needs ",
                                     plan.arena_bytes, " bytes; the budget is ", in.hbm_budget),
                      plan.arena_bytes);
}

}  // namespace htp
