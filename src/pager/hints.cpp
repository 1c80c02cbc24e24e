// The pager's hints, its public API for what comes next: prefetch, the schedule, routed groups
// (experts after their router) and expect (the router's choice). See include/htp/pager.hpp and
// docs/pager.md ("Lookahead", "Routed groups").
#include "pager/pager_impl.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>
#include <chrono>

namespace htp {

void pager::prefetch(tensor_handle h) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  p.reap();
  p.prefetch.prefetch(p.slot_of(h), p.room);
}

void pager::expect(const std::vector<tensor_handle>& hs) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  std::vector<std::uint32_t> slots;
  slots.reserve(hs.size());
  for (tensor_handle h : hs) slots.push_back(p.slot_of(h));
  p.reap();
  p.prefetch.expect(slots, p.room);
}

void pager::set_routed_group(tensor_handle anchor, const std::vector<tensor_handle>& members,
                             unsigned k) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  const std::uint32_t a = p.slot_of(anchor);
  const std::string& name = p.tensors[a].name;
  HTP_EXPECTS(p.prefetch.future().groups.anchor_of(a) < 0, invalid_argument, "set_routed_group('",
              name, "'): the anchor is itself a member of a routed group");
  HTP_EXPECTS(members.empty() || (k >= 1 && k <= members.size()), invalid_argument,
              "set_routed_group('", name, "'): k is ", k, " for a group of ", members.size(),
              " members; it must be in [1, ", members.size(), "]");
  std::vector<std::uint32_t> slots;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::uint32_t s = p.slot_of(members[i]);
    const std::int64_t other = p.prefetch.future().groups.anchor_of(s);
    HTP_EXPECTS(s != a && (other < 0 || other == a) && !p.prefetch.future().groups.is_anchor(s) &&
                    std::find(slots.begin(), slots.end(), s) == slots.end(),
                invalid_argument, "set_routed_group('", name, "'): member ", i, " ('",
                p.tensors[s].name,
                "') is the anchor, an anchor of its own, repeated, or in another group");
    slots.push_back(s);
  }
  p.prefetch.set_routed_group(a, std::move(slots), k);
}

void pager::set_schedule(const std::vector<tensor_handle>& sequence, bool cyclic) {
  auto& p = *impl_;
  std::lock_guard lock(p.mutex);
  std::vector<std::uint32_t> slots;
  slots.reserve(sequence.size());
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    try {
      (void)p.tensors.get(sequence[i]);
    } catch (const invalid_argument& e) {
      throw invalid_argument(detail::concat("set_schedule: entry ", i, ": ", e.what()));
    }
    slots.push_back(sequence[i].index);
  }
  p.reap();
  p.prefetch.set_schedule(std::move(slots), cyclic, p.room);
}

}  // namespace htp
