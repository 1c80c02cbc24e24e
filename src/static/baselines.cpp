// round_robin_plan: the k-slot scheme engines run today, as a static plan (a baseline).
#include "plan_internal.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <algorithm>
#include <map>

namespace htp {
namespace {

/// The positions of each layer, in order (layer_of empty: each position its own layer).
std::vector<std::vector<std::size_t>> layers_of(const static_plan_input& in,
                                                const std::vector<std::size_t>& layer_of) {
  std::vector<std::vector<std::size_t>> layers;
  std::map<std::size_t, std::size_t> index;
  for (std::size_t p = 0; p < in.positions.size(); ++p) {
    const std::size_t id = layer_of.empty() ? p : layer_of[p];
    if (id == static_plan::npos) continue;
    const auto [it, fresh] = index.emplace(id, layers.size());
    if (fresh) layers.emplace_back();
    layers[it->second].push_back(p);
  }
  return layers;
}

/// A layer's shape: its tensors' sizes, sorted.
std::vector<std::size_t> shape_of(const static_plan_input& in,
                                  const std::vector<std::size_t>& positions) {
  std::vector<std::size_t> sizes;
  for (const std::size_t p : positions) {
    for (const std::size_t t : in.positions[p].tensors) sizes.push_back(in.tensors[t].bytes);
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

}  // namespace

static_plan round_robin_plan(const static_plan_input& in, std::size_t k,
                             const std::vector<std::size_t>& layer_of) {
  static_detail::check_input(in);
  HTP_EXPECTS(k >= 1, invalid_argument, "round_robin_plan: k must be at least 1");
  HTP_EXPECTS(layer_of.empty() || layer_of.size() == in.positions.size(), invalid_argument,
              "round_robin_plan: ", layer_of.size(), " layer ids for ", in.positions.size(),
              " positions");
  // The decoder layers: those shaped as the most common layer.
  const auto all = layers_of(in, layer_of);
  std::map<std::vector<std::size_t>, std::size_t> count;
  for (const auto& l : all) ++count[shape_of(in, l)];
  const auto common = std::max_element(count.begin(), count.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
  std::vector<const std::vector<std::size_t>*> layers;
  for (const auto& l : all) {
    if (shape_of(in, l) == common->first) layers.push_back(&l);
  }
  std::size_t layer_bytes = 0;  // as the ring packs them
  if (!layers.empty()) {
    for (const std::size_t p : *layers[0]) {
      for (const std::size_t t : in.positions[p].tensors) {
        layer_bytes += (in.tensors[t].bytes + 255) / 256 * 256;
      }
    }
  }
  // Stream the last layers, as few as fit: layers[r ..] for the largest r that fits, through a
  // ring of k layers (k slots).
  const auto referenced = static_detail::referenced(in);
  static_plan plan;
  for (std::size_t r = layers.size() + 1; r-- > 0;) {
    static_shape shape{std::vector<bool>(in.tensors.size(), true), k * layer_bytes};
    for (std::size_t i = r; i < layers.size(); ++i) {
      for (const std::size_t p : *layers[i]) {
        for (const std::size_t t : in.positions[p].tensors) shape.resident[t] = false;
      }
    }
    if (static_detail::build(in, shape, referenced, plan)) return plan;
  }
  throw out_of_memory(detail::concat("round_robin_plan: even with all ", layers.size(),
                                     " layers streamed through ", k, " slots the arena needs ",
                                     plan.arena_bytes, " bytes; the budget is ", in.hbm_budget),
                      plan.arena_bytes);
}

}  // namespace htp
