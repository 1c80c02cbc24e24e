// The tensors holding HBM, ordered so that an eviction victim is found in O(log n) under either
// rule, instead of scanning every registered tensor. Not thread-safe: the pager guards it.
//
// Each tensor holding HBM is in one group: clean and dirty (unpinned; a dirty one costs a
// write-back) or pinned (acquired now). Within a group, three orders:
//  - lru:   by last access, oldest first (the LRU rule);
//  - never: tensors the schedule will not use again (or never names), oldest first: Belady's rule
//           evicts these before any scheduled tensor;
//  - next:  scheduled tensors by the absolute time of their next use (schedule.hpp); Belady's
//           victim is the last one.
// Keys are set by update() from the tensor's state; the pager calls it after every change.
#pragma once

#include <cstdint>
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
  std::uint64_t last_access = 0;
  std::uint64_t next_use = 0;  ///< schedule time of its next use; `never` = not scheduled again
  friend bool operator==(const victim_key& a, const victim_key& b) noexcept {
    return a.indexed == b.indexed && (!a.indexed || (a.group == b.group && a.last_access == b.last_access &&
                                                     a.next_use == b.next_use));
  }
};

class victim_index {
 public:
  using entry = std::pair<std::uint64_t, std::uint32_t>;  // (key, slot)
  using ordered = std::set<entry>;

  /// Puts `slot` where `key` says (removing it from where it was). O(log n).
  void update(std::uint32_t slot, const victim_key& key);
  /// The key `slot` is indexed under now (indexed = false if absent).
  const victim_key& key_of(std::uint32_t slot) const;
  /// Removes every entry.
  void clear();

  const ordered& lru(victim_group g) const { return lru_[static_cast<int>(g)]; }
  const ordered& never(victim_group g) const { return never_[static_cast<int>(g)]; }
  const ordered& next(victim_group g) const { return next_[static_cast<int>(g)]; }
  /// Number of tensors indexed in group `g`.
  std::size_t size(victim_group g) const { return lru_[static_cast<int>(g)].size(); }

 private:
  void erase(std::uint32_t slot, const victim_key& key);
  void insert(std::uint32_t slot, const victim_key& key);

  std::vector<victim_key> keys_;  // by slot
  ordered lru_[victim_group_count];
  ordered never_[victim_group_count];
  ordered next_[victim_group_count];
};

}  // namespace htp::detail
