// Routed groups (pager::set_routed_group): tensors used in a data-dependent way after a scheduled
// anchor, such as a mixture-of-experts layer's experts after its router, and their popularity.
// Not thread-safe: the pager guards it.
//
// Popularity is a count of acquires with exponential decay: each acquire adds 1, and every score
// halves each `half_life` acquires of any member. Since decay is the same for all members, a score
// is kept in inflated units, score * 2^(clock / half_life), so an acquire touches one score and
// the order of the others never changes; all are rescaled together (O(members)) when the inflation
// nears the range of a double. The victim index orders a group's members in HBM by these scores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace htp::detail {

class routed_groups {
 public:
  struct group {
    std::vector<std::uint32_t> members;
    unsigned k = 1;
  };

  explicit routed_groups(double half_life) : half_life_(half_life) {}

  /// Replaces the group after `anchor` (an empty `members` removes it). The caller has checked
  /// the rules (pager::set_routed_group). Returns the slots whose membership changed.
  std::vector<std::uint32_t> set(std::uint32_t anchor, std::vector<std::uint32_t> members,
                                 unsigned k);
  bool empty() const noexcept { return groups_.empty(); }
  /// The group that follows `anchor`, or null.
  const group* after(std::uint32_t anchor) const;
  /// The anchor of the group `slot` is a member of, or -1.
  std::int64_t anchor_of(std::uint32_t slot) const;
  /// True when `slot` anchors a group.
  bool is_anchor(std::uint32_t slot) const { return groups_.count(slot) != 0; }

  /// A member was acquired. Returns true when every score was rescaled (the caller re-keys the
  /// members in HBM).
  bool on_acquire(std::uint32_t slot);
  /// The member's popularity, in units comparable across all members right now (0 if never
  /// acquired or not a member).
  double score(std::uint32_t slot) const;
  /// The `g.k` most popular members of `g`, most popular first (ties: declaration order).
  std::vector<std::uint32_t> top(const group& g) const;
  /// Forgets a slot (its tensor was unregistered): out of its group, or its group if an anchor.
  /// Returns the slots whose membership changed.
  std::vector<std::uint32_t> forget_slot(std::uint32_t slot);

 private:
  double half_life_;
  std::uint64_t clock_ = 0;  // member acquires so far (since the last rescale)
  double inflation_ = 1;     // 2^(clock_ / half_life_)
  std::unordered_map<std::uint32_t, group> groups_;          // by anchor
  std::unordered_map<std::uint32_t, std::uint32_t> anchor_;  // member -> anchor
  std::unordered_map<std::uint32_t, double> score_;          // member -> inflated score
};

}  // namespace htp::detail
