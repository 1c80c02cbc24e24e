// The access schedule behind schedule-aware prefetch and Belady's eviction: a sequence of tensor
// slots (e.g. the layers of a forward pass), optionally cyclic, and a cursor that each acquire
// advances. Not thread-safe: the pager guards it.
//
// Time is counted in absolute accesses: position p of cycle c is c * size() + p. A slot's next use
// is an absolute time that changes only when the slot is accessed or the cursor skips over it, so
// the pager can keep tensors ordered by next use (victim_index) without re-keying them each step.
// Costs: next_use, distance and on_access (in order) are O(log k) for a slot named k times; an
// access that skips m positions costs O(m); set and forget are O(n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace htp::detail {

class access_schedule {
 public:
  static constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();

  /// Replaces the sequence (slot indices) and resets the cursor to its start.
  void set(std::vector<std::uint32_t> sequence, bool cyclic);
  bool empty() const noexcept { return sequence_.empty(); }
  bool cyclic() const noexcept { return cyclic_; }
  std::size_t size() const noexcept { return sequence_.size(); }
  /// True when the schedule names `slot`.
  bool contains(std::uint32_t slot) const noexcept;

  /// Records an access of `slot`: moves the cursor just past the slot's next occurrence at or
  /// after the cursor (wrapping when cyclic). An access the schedule does not expect there leaves
  /// the cursor alone. When the cursor jumps over other positions, the slots there are appended to
  /// `skipped` (if given): their next use changed.
  void on_access(std::uint32_t slot, std::vector<std::uint32_t>* skipped = nullptr);
  /// The absolute time of the cursor (accesses so far, counting whole cycles).
  std::uint64_t now() const noexcept { return cycle_ * sequence_.size() + cursor_; }
  /// Absolute time of `slot`'s next use at or after the cursor; `never` if none.
  std::uint64_t next_use(std::uint32_t slot) const;
  /// Absolute time of `slot`'s first use strictly after absolute time `t`; `never` if none.
  std::uint64_t next_use_after(std::uint32_t slot, std::uint64_t t) const;
  /// Accesses from the cursor until `slot` is next used: 0 = it is the next access; `never` when
  /// the schedule will not use it again.
  std::uint64_t distance(std::uint32_t slot) const;
  /// Like distance(), but counted from just after `after_slot`'s next access: how far `slot`'s
  /// next use lies beyond that point. `never` if either is not used again.
  std::uint64_t distance_after(std::uint32_t slot, std::uint32_t after_slot) const;
  /// The next `k` accesses from the cursor (fewer at the end of a non-cyclic schedule).
  std::vector<std::uint32_t> upcoming(std::size_t k) const;
  /// Accesses left from the cursor: size() when cyclic (one cycle ahead), else to the end.
  std::size_t remaining() const noexcept {
    return cyclic_ ? sequence_.size() : sequence_.size() - cursor_;
  }
  /// The position (index into the sequence) of the i-th access from the cursor (0 = the next);
  /// i < remaining(). O(1).
  std::size_t position_at(std::size_t i) const noexcept {
    const std::size_t p = cursor_ + i;
    return p < sequence_.size() ? p : p - sequence_.size();
  }
  /// The slot of the i-th access from the cursor; i < remaining(). O(1).
  std::uint32_t upcoming_at(std::size_t i) const noexcept { return sequence_[position_at(i)]; }
  /// Completed cycles (0 for a schedule that is not cyclic).
  std::uint64_t cycle() const noexcept { return cycle_; }
  /// Removes a slot from the schedule (its tensor was unregistered). O(n) when it is named.
  void forget(std::uint32_t slot);

 private:
  /// First absolute use of `slot` at or after absolute time `t`.
  std::uint64_t first_use_from(std::uint32_t slot, std::uint64_t t) const;

  std::vector<std::uint32_t> sequence_;
  // Positions of each slot, sorted, as one flat array: slot s's are
  // positions_[offsets_[s] .. offsets_[s + 1]). offsets_ covers slots up to the largest named.
  std::vector<std::size_t> offsets_;
  std::vector<std::size_t> positions_;
  std::size_t cursor_ = 0;   // position in [0, size())
  std::uint64_t cycle_ = 0;  // completed cycles
  bool cyclic_ = false;
};

}  // namespace htp::detail
