// The access schedule behind schedule-aware prefetch and Belady's eviction: a sequence of tensor
// slots (e.g. the layers of a forward pass), optionally cyclic, and a cursor that each acquire
// advances. Not thread-safe: the pager guards it.
#pragma once

#include <cstdint>
#include <limits>
#include <unordered_map>
#include <vector>

namespace htp::detail {

class access_schedule {
 public:
  static constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();

  /// Replaces the sequence (slot indices) and resets the cursor to its start.
  void set(std::vector<std::uint32_t> sequence, bool cyclic);
  bool empty() const noexcept { return sequence_.empty(); }
  bool cyclic() const noexcept { return cyclic_; }

  /// Records an access of `slot`: moves the cursor just past the slot's next occurrence at or
  /// after the cursor (wrapping when cyclic). An access the schedule does not expect there leaves
  /// the cursor alone.
  void on_access(std::uint32_t slot);
  /// Accesses from the cursor until `slot` is next used: 0 = it is the next access; `never` when
  /// the schedule will not use it again.
  std::uint64_t distance(std::uint32_t slot) const;
  /// Like distance(), but counted from just after `after_slot`'s next access: how far `slot`'s
  /// next use lies beyond that point. `never` if either is not used again.
  std::uint64_t distance_after(std::uint32_t slot, std::uint32_t after_slot) const;
  /// The next `k` accesses from the cursor (fewer at the end of a non-cyclic schedule).
  std::vector<std::uint32_t> upcoming(std::size_t k) const;
  /// Removes a slot from the schedule (its tensor was unregistered).
  void forget(std::uint32_t slot);

 private:
  /// Distance from position `from` (< size) to slot's next use at or after it.
  std::uint64_t distance_from(std::uint32_t slot, std::size_t from) const;

  std::vector<std::uint32_t> sequence_;
  std::unordered_map<std::uint32_t, std::vector<std::size_t>> positions_;  // sorted, per slot
  std::size_t cursor_ = 0;
  bool cyclic_ = false;
};

}  // namespace htp::detail
