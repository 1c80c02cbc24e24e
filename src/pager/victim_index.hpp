// The tensors holding HBM, ordered so that an eviction victim is found without scanning every
// registered tensor. Not thread-safe: the pager guards it.
//
// Each tensor holding HBM is in one group: clean and dirty (unpinned; a dirty one costs a
// write-back) or pinned (acquired now). Within a group, three orders:
//  - recency: the order tensors joined the group (an acquire moves a tensor to `pinned`, its
//    release back to clean or dirty), least recent first: the LRU rule.
//  - never:   the same order, for tensors the schedule will not use again (or never names):
//             Belady's rule evicts these before any scheduled tensor.
//  - next:    scheduled tensors by the absolute time of their next use (schedule.hpp); Belady's
//             victim is the last one. An ordered set: O(log n), only for scheduled tensors.
//  - routed:  members of routed groups (routed_groups.hpp) the schedule does not name, by
//             popularity, least popular first; they are in this order instead of `never`.
// The two recency orders are queues with lazy deletion: joining appends (slot, stamp); leaving
// only changes the slot's own stamp, and stale entries are dropped when they reach the head (or
// when they outnumber the live ones). So an acquire+release of an unscheduled tensor (KV blocks,
// activations) touches its own entry and the queues' tails, whatever the number of tensors.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <utility>
#include <vector>

namespace htp::detail {

enum class victim_group : std::uint8_t { clean = 0, dirty = 1, pinned = 2 };
inline constexpr int victim_group_count = 3;

/// Where a tensor belongs in the index.
struct victim_key {
  bool indexed = false;  ///< holds HBM (and its page-in has not failed)
  victim_group group = victim_group::clean;
  std::uint64_t next_use = 0;  ///< schedule time of its next use; `never` = not scheduled again
  double popularity = -1;      ///< a routed group member's score; < 0 = not a member
  /// Ordered by popularity (a member the schedule does not name).
  bool routed() const noexcept;
  friend bool operator==(const victim_key& a, const victim_key& b) noexcept {
    return a.indexed == b.indexed &&
           (!a.indexed ||
            (a.group == b.group && a.next_use == b.next_use && a.popularity == b.popularity));
  }
};

class victim_index {
 public:
  static constexpr std::uint32_t none = 0xffffffffu;
  using entry = std::pair<std::uint64_t, std::uint32_t>;  // (next use, slot)

  /// Puts `slot` where `key` says. Joining a group (or the index) puts it last in recency order.
  void update(std::uint32_t slot, const victim_key& key);
  /// The key `slot` is indexed under now (indexed = false if absent).
  const victim_key& key_of(std::uint32_t slot) const;
  /// When `slot` joined its group, on the index's clock (larger = more recent); 0 if absent.
  std::uint64_t recency(std::uint32_t slot) const;
  /// The index's clock: the recency the next joiner gets.
  std::uint64_t clock() const noexcept { return clock_; }

  /// Calls f(slot) for group g's members in recency order (least recent first) until f returns
  /// true; returns that slot, or `none`.
  template <typename F>
  std::uint32_t find_lru(victim_group g, F&& f) const {
    return find(lru_[static_cast<int>(g)], false, f);
  }
  /// The same over g's never-again members.
  template <typename F>
  std::uint32_t find_never(victim_group g, F&& f) const {
    return find(never_[static_cast<int>(g)], true, f);
  }
  /// Scheduled members of g by next use.
  const std::set<entry>& next(victim_group g) const { return next_[static_cast<int>(g)]; }
  /// Routed group members of g by popularity, least popular first.
  const std::set<std::pair<double, std::uint32_t>>& routed(victim_group g) const {
    return routed_[static_cast<int>(g)];
  }
  /// Number of tensors indexed in group `g`.
  std::size_t size(victim_group g) const { return lru_[static_cast<int>(g)].live; }

 private:
  struct per_slot {
    victim_key key;
    std::uint64_t joined = 0;  // stamp of its place in the group's recency queue
    std::uint64_t never = 0;   // stamp of its place in the group's never queue (0 = not there)
  };
  struct queue {
    std::deque<std::pair<std::uint32_t, std::uint64_t>> q;  // (slot, stamp), oldest first
    std::size_t live = 0;
  };
  bool valid(const std::pair<std::uint32_t, std::uint64_t>& e, bool never) const {
    return (never ? slots_[e.first].never : slots_[e.first].joined) == e.second;
  }
  void push(queue& q, std::uint32_t slot, std::uint64_t stamp);
  void leave(queue& q, bool never);
  template <typename F>
  std::uint32_t find(queue& q, bool never, F& f) const {
    while (!q.q.empty() && !valid(q.q.front(), never)) q.q.pop_front();  // stale at the head
    for (const auto& e : q.q) {
      if (valid(e, never) && f(e.first)) return e.first;
    }
    return none;
  }

  std::vector<per_slot> slots_;
  mutable queue lru_[victim_group_count];
  mutable queue never_[victim_group_count];
  std::set<entry> next_[victim_group_count];
  std::set<std::pair<double, std::uint32_t>> routed_[victim_group_count];
  std::uint64_t clock_ = 1;
};

}  // namespace htp::detail
