// The shared tier's segment layout and its low-level pieces (internal to src/shared_tier and the
// tests). The segment is one file, shm_dir/htp.<name>, mapped MAP_SHARED by every process:
//
//   segment_header (magic, version, layout, sizes, the robust mutex, rank slots, link cells)
//   entry table    (max_entries x tier_entry), at header.entries_offset
//   data area      (data_bytes, page-granular extents), at header.data_offset
//
// Every field other processes may read without the mutex (states, pids) is an atomic of a
// lock-free size, so the layout holds no pointers and reads the same in every process.
#pragma once

#include <htp/detail/link_cell.hpp>
#include <htp/shared_tier.hpp>

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace htp::shared_tier_detail {

inline constexpr char segment_magic[8] = {'h', 't', 'p', 't', 'i', 'e', 'r', '1'};
/// Bumped whenever the meaning of a field changes (the sizes alone are in layout_hash).
inline constexpr std::uint32_t layout_version = 1;
inline constexpr std::size_t link_cells = 16;
inline constexpr std::size_t max_name_bytes = 255;
/// The file name prefix of every tier segment in shm_dir.
inline constexpr const char* file_prefix = "htp.";

enum slot_state : std::uint32_t { slot_free = 0, slot_live = 1 };
enum entry_state : std::uint32_t { entry_free = 0, entry_filling = 1, entry_ready = 2 };

/// One attached process: pid and its start time (field 22 of /proc/<pid>/stat, clock ticks since
/// boot), so a reused pid is not taken for the process that held the slot.
struct rank_slot {
  std::atomic<std::uint32_t> state;
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint64_t> start_time;
};

/// One named entry. Free entries (state 0) own no extent.
struct tier_entry {
  std::atomic<std::uint32_t> state;
  std::uint32_t filler;                ///< the slot filling it (state filling)
  std::uint64_t offset;                ///< in the data area, a multiple of page_bytes
  std::uint64_t bytes;                 ///< as published
  std::uint64_t extent;                ///< bytes rounded up to page_bytes
  std::atomic<std::uint64_t> holders;  ///< bit s: rank slot s holds it
  char name[max_name_bytes + 1];       ///< NUL-terminated
};

struct segment_header {
  char magic[8];  ///< written last when the segment is made
  char version[24];
  std::uint32_t layout;
  std::uint32_t layout_hash;
  std::uint64_t page_bytes;
  std::uint64_t data_bytes;
  std::uint64_t max_entries;
  std::uint64_t entries_offset;
  std::uint64_t data_offset;
  std::uint64_t segment_bytes;
  alignas(64) pthread_mutex_t mutex;
  alignas(64) rank_slot ranks[shared_tier::max_ranks];
  alignas(64) detail::link_cell links[link_cells];
};

/// The sizes and offsets a layout yields; two processes agree on a layout only if this agrees.
std::uint32_t compute_layout_hash() noexcept;

/// Where the entry table and data area go for a config (validated).
struct layout_plan {
  std::uint64_t data_bytes = 0;
  std::uint64_t entries_offset = 0;
  std::uint64_t data_offset = 0;
  std::uint64_t segment_bytes = 0;
};
layout_plan plan_layout(const shared_tier_config& c);

inline tier_entry* entries_of(segment_header* h) {
  return reinterpret_cast<tier_entry*>(reinterpret_cast<char*>(h) + h->entries_offset);
}
inline const tier_entry* entries_of(const segment_header* h) {
  return reinterpret_cast<const tier_entry*>(reinterpret_cast<const char*>(h) + h->entries_offset);
}
inline char* data_of(segment_header* h) { return reinterpret_cast<char*>(h) + h->data_offset; }

/// Checks a tier name: letters, digits, '.', '_', '-', 1 to 200 characters.
/// @throws htp::invalid_argument naming the rule.
void check_tier_name(const std::string& name);
std::string segment_path(const std::string& shm_dir, const std::string& name);

/// Whether slot `s` names a live process (detail::process_alive: pid alive, same start time, not a
/// zombie).
bool slot_alive(const rank_slot& s) noexcept;

/// "htp 0.1.0 (layout 1, page 64 KiB)" for messages.
std::string describe_build(const char* version, std::uint32_t layout, std::uint64_t page_bytes);
std::string format_bytes(std::uint64_t bytes);

/// Checks the header's magic, version and layout against this build's. Returns "" if they match,
/// else why not ("made by htp 0.0.9 (layout 3, ...); this process is ...").
std::string header_mismatch(const segment_header& h, std::size_t file_bytes);
/// Whether the header's magic is all zero (a creator died before finishing it).
bool header_unfinished(const segment_header& h) noexcept;

/// Makes the header of a freshly truncated segment (mutex, sizes; magic last).
/// @throws htp::io_error if the mutex cannot be made.
void init_header(segment_header* h, const shared_tier_config& c, const layout_plan& p);

/// Space preflight before making a segment of `bytes` in `shm_dir` (`reusable`: bytes of a stale
/// segment being remade). @throws htp::out_of_memory naming the size and the setting to change.
void check_shm_space(const std::string& shm_dir, std::uint64_t bytes, std::uint64_t reusable);
/// The memlock preflight of lock_in_memory. @throws htp::out_of_memory naming ulimit -l.
void check_memlock(std::uint64_t bytes);
std::string memlock_advice(std::uint64_t bytes);

/// Takes slot `s` back from a dead (or closing) process: clears its holds, frees entries no one
/// holds and entries it was filling, and its link cells' waiting counts. Caller holds the mutex.
void reclaim_slot(segment_header* h, std::size_t s) noexcept;
/// Reclaims every slot of a dead process; returns the number of live slots. Caller holds the mutex.
std::size_t reclaim_dead(segment_header* h) noexcept;

/// Snapshot counts of a mapped header (no mutex taken; liveness read from /proc).
void count_into(const segment_header* h, shared_tier_listing& out) noexcept;

/// Takes the segment file's flock (LOCK_EX), polling until `timeout`.
/// @throws htp::logic_error on timeout, htp::io_error if flock fails.
void flock_with_deadline(int fd, const std::string& path, std::chrono::milliseconds timeout);

/// The robust mutex, locked with a deadline: on EOWNERDEAD the dead owner's slots are reclaimed
/// and the mutex made consistent. @throws htp::logic_error on timeout or an unrecoverable mutex.
void lock_segment(segment_header* h, std::chrono::milliseconds timeout);
void unlock_segment(segment_header* h) noexcept;

/// First-fit over the data area: page-granular extents for `sizes` (each rounded up to
/// page_bytes), avoiding every non-free entry's extent. Returns the offsets, or an empty vector
/// if they do not all fit; `used`, `free_bytes` and `largest` then describe the area.
std::vector<std::uint64_t> first_fit(const segment_header* h,
                                     const std::vector<std::uint64_t>& extents, std::uint64_t& used,
                                     std::uint64_t& free_bytes, std::uint64_t& largest);

}  // namespace htp::shared_tier_detail
