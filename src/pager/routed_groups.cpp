// Routed groups and their popularity (see routed_groups.hpp).
#include "pager/routed_groups.hpp"

#include <algorithm>
#include <cmath>

namespace htp::detail {

std::vector<std::uint32_t> routed_groups::set(std::uint32_t anchor,
                                              std::vector<std::uint32_t> members, unsigned k) {
  std::vector<std::uint32_t> changed;
  if (auto it = groups_.find(anchor); it != groups_.end()) {
    for (std::uint32_t m : it->second.members) {
      anchor_.erase(m);
      score_.erase(m);
      changed.push_back(m);
    }
    groups_.erase(it);
  }
  if (members.empty()) return changed;
  for (std::uint32_t m : members) {
    anchor_[m] = anchor;
    score_.emplace(m, 0.0);
    changed.push_back(m);
  }
  groups_[anchor] = group{std::move(members), k};
  return changed;
}

const routed_groups::group* routed_groups::after(std::uint32_t anchor) const {
  const auto it = groups_.find(anchor);
  return it == groups_.end() ? nullptr : &it->second;
}

std::int64_t routed_groups::anchor_of(std::uint32_t slot) const {
  const auto it = anchor_.find(slot);
  return it == anchor_.end() ? -1 : static_cast<std::int64_t>(it->second);
}

bool routed_groups::on_acquire(std::uint32_t slot) {
  const auto it = score_.find(slot);
  if (it == score_.end()) return false;
  ++clock_;
  inflation_ = std::exp2(static_cast<double>(clock_) / half_life_);
  it->second += inflation_;
  if (inflation_ < 1e200) return false;
  // Rescale every score to the present (the order is unchanged) and restart the clock.
  for (auto& [s, v] : score_) v /= inflation_;
  clock_ = 0;
  inflation_ = 1;
  return true;
}

double routed_groups::score(std::uint32_t slot) const {
  const auto it = score_.find(slot);
  return it == score_.end() ? 0.0 : it->second;
}

std::vector<std::uint32_t> routed_groups::top(const group& g) const {
  std::vector<std::uint32_t> out = g.members;
  std::stable_sort(out.begin(), out.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return score(a) > score(b); });
  out.resize(std::min<std::size_t>(g.k, out.size()));
  return out;
}

std::vector<std::uint32_t> routed_groups::forget_slot(std::uint32_t slot) {
  if (groups_.count(slot) != 0) return set(slot, {}, 0);
  const auto it = anchor_.find(slot);
  if (it == anchor_.end()) return {};
  auto& members = groups_[it->second].members;
  members.erase(std::remove(members.begin(), members.end(), slot), members.end());
  groups_[it->second].k =
      std::min<unsigned>(groups_[it->second].k, static_cast<unsigned>(members.size()));
  if (members.empty()) groups_.erase(it->second);
  score_.erase(slot);
  anchor_.erase(it);
  return {slot};
}

}  // namespace htp::detail
