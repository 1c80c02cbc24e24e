// A shared link's state laid out for shared memory: the cell a node's shared tier keeps for each
// link its processes share (shared_tier::link). Internal: shared_tier places the cells, and
// shared_link (over a cell) uses them. Lock-free: a generic cell rate algorithm (GCRA, a token
// bucket written as one "theoretical arrival time" word) on one atomic, and per-slot waiting counts
// so a dead process's counts can be cleared by whoever reclaims its slot.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace htp {
class shared_link;
}

namespace htp::detail {

/// Slots (processes) one cell counts waiters for; equals shared_tier::max_ranks.
inline constexpr std::size_t link_cell_slots = 64;
/// Priorities a cell counts (transfer_priority_count).
inline constexpr std::size_t link_cell_priorities = 4;

/// A link's state in shared memory. Zero-filled memory is a free cell. Standard layout, no
/// pointers: every process maps it at its own address.
struct link_cell {
  std::atomic<std::uint32_t> state;  ///< 0 free, 1 being made, 2 ready
  char name[60];                     ///< NUL-terminated
  std::uint64_t made_rate;           ///< bytes per second it was made with (claims compare it)
  std::uint64_t burst;               ///< bytes
  std::atomic<std::uint64_t> rate;   ///< bytes per second now (shared_link::set_rate)
  /// GCRA: the time (steady clock, ns) at which the bucket would be full again had nothing else
  /// been taken. A take of b bytes at `now` succeeds when max(tat, now) + b/rate - now <=
  /// burst/rate.
  std::atomic<std::int64_t> tat_ns;
  std::atomic<std::uint64_t> taken;                      ///< bytes taken since the cell was made
  std::atomic<std::uint64_t> taken_by[link_cell_slots];  ///< of which by each slot's process
  /// waiting[slot][priority]: dispatchers of that process waiting at that priority.
  std::atomic<std::uint32_t> waiting[link_cell_slots][link_cell_priorities];
  /// When each slot's process last asked the cell for tokens (steady clock, ns). A waiting
  /// dispatcher asks again at least once per burst time, so counts of a slot that has not asked
  /// for far longer are a dead process's, ignored until its slot is reclaimed: a rank killed while
  /// its faults waited holds back no other rank's prefetch.
  std::atomic<std::int64_t> asked_ns[link_cell_slots];
};

/// A cell's clock: the steady clock (shared by every process of the machine); tests inject one.
using link_cell_clock = std::int64_t (*)() noexcept;

/// Makes a free cell ready with this name, rate and burst, or checks a ready one has them.
/// Returns false if the cell holds another name (the caller tries the next cell).
/// A cell left half made by a process that died while making it is made anew (callers claim under
/// the tier's lock). @throws htp::invalid_argument for a zero rate or burst, a burst longer than
/// 10^9 s at the rate, a name longer than 59 bytes, or a ready cell of this name with another rate
/// or burst (the message names both).
bool link_cell_claim(link_cell& cell, const std::string& name, std::uint64_t bytes_per_second,
                     std::uint64_t burst_bytes);
/// Clears the waiting counts of `slot` (its process died or closed). Never throws.
void link_cell_forget_slot(link_cell& cell, std::size_t slot) noexcept;
/// A shared_link whose tokens and waiting counts live in `cell`, counting this process's waiters
/// under `slot`; `owner` keeps the cell's memory mapped while the link lives.
/// @throws htp::invalid_argument if the cell is not ready or slot >= link_cell_slots.
std::shared_ptr<shared_link> make_cell_link(link_cell& cell, std::size_t slot,
                                            std::shared_ptr<const void> owner,
                                            link_cell_clock clock = nullptr);
/// Bytes the process of `slot` took from the cell (the link's split between processes).
/// Never throws.
std::uint64_t link_cell_taken_by(const link_cell& cell, std::size_t slot) noexcept;

}  // namespace htp::detail
