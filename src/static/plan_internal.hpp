// What the static plan's layout, planner and step share inside htp (not installed).
#pragma once

#include <htp/static_plan.hpp>

#include <vector>

namespace htp::static_detail {

/// Checks `in` as plan_static documents (@throws htp::invalid_argument naming what is wrong).
void check_input(const static_plan_input& in);

/// Per tensor: whether some position reads it.
std::vector<bool> referenced(const static_plan_input& in);

/// Lays out `shape` into `plan` and predicts its step; false (the layout filled in, no
/// prediction) when its arena exceeds the budget. No checks: the caller ran check_input.
bool build(const static_plan_input& in, const static_shape& shape,
           const std::vector<bool>& referenced, static_plan& plan);

}  // namespace htp::static_detail
