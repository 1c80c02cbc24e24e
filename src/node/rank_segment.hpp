// The rendezvous of sim collectives across processes (make_sim_rank_collectives): a shared-memory
// segment /dev/shm/htp-coll.<name> holding a header, one record per rank and one staging area per
// rank. For htp's own sources; not installed.
//
// Note [Sim collectives across processes]
// The first rank to arrive makes the segment (O_CREAT | O_EXCL), sizes it, then publishes its
// header (magic last); the others open it, wait for the magic and check the world size. Each rank
// claims its record (pid and process start time, so a reused pid is not taken for the rank) and
// waits until every rank has. A collective moves in pieces of at most the staging area's size, all
// ranks in lockstep; piece q (numbered from 1 over the life of the world):
//  1. a rank waits until every rank has read piece q - 1 (its staging area is free again),
//  2. copies its piece into its staging area, says what the collective is, and sets arrived = q,
//  3. waits until every rank has arrived at q, checks they make the same collective,
//  4. reads every rank's staging area into its result, and sets done = q.
// Every wait sleeps on a futex in the segment (woken by every change) for at most 20 ms at a
// time, and between sleeps looks at the ranks it waits for: one whose process is gone (or a
// zombie), or that left, aborts the world at once; the rendezvous timeout aborts it otherwise. An
// abort sets the flag and reason in the header: every waiting rank returns and every later call
// throws. The last rank to leave (the others have left or are dead) removes the segment.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace htp::detail {

/// One rank's record in the segment.
struct alignas(64) rank_record {
  std::atomic<std::uint32_t> state;  // 0: free; 1: being claimed; 2: joined (pid is valid)
  std::atomic<std::uint32_t> left;   // 1 once the rank left (its collectives are gone)
  std::int64_t pid;
  std::uint64_t start_time;            // field 22 of /proc/<pid>/stat
  std::atomic<std::uint64_t> arrived;  // the last piece whose bytes are in the staging area
  std::atomic<std::uint64_t> done;     // the last piece this rank has read
  std::atomic<std::uint64_t> kind;     // the collective of `arrived`: see rank_collectives.cpp
  std::atomic<std::uint64_t> bytes;    // its bytes per rank
  std::atomic<std::uint64_t> call;     // its index
};

/// The segment of one world, mapped in this process, with this process's rank claimed.
class rank_segment {
 public:
  using clock = std::chrono::steady_clock;
  /// Opens or makes the segment of `name` and claims `rank`. @throws htp::logic_error for a
  /// segment of another world size, a rank already claimed, or a segment never initialised within
  /// `timeout`; htp::io_error if a system call fails.
  rank_segment(const std::string& name, std::size_t rank, std::size_t world,
               clock::duration timeout);
  /// Leaves: marks the record left; the last to leave removes the segment's name.
  ~rank_segment();
  rank_segment(const rank_segment&) = delete;
  rank_segment& operator=(const rank_segment&) = delete;

  /// Waits until every rank has joined. @throws htp::logic_error naming the ranks that did not
  /// (the world is aborted then), or the reason of an abort.
  void wait_joined();
  /// Waits until ready(r) holds for every rank r: true; false once the world is aborted (by this
  /// wait too: a rank not ready is dead or left, or the timeout ran out) or `stop` is set.
  /// `during` names what is waited at in the reasons ("all_gather #3").
  bool wait_all(const std::function<bool(const rank_record&)>& ready, const std::string& during,
                const std::atomic<bool>& stop);

  std::size_t rank() const noexcept { return rank_; }
  std::size_t world() const noexcept { return world_; }
  /// Bytes of each rank's staging area.
  std::size_t staging() const noexcept { return staging_; }
  rank_record& record(std::size_t r) const noexcept;
  unsigned char* staging_area(std::size_t r) const noexcept;
  /// "/dev/shm/htp-coll.<name>".
  const std::string& path() const noexcept { return path_; }

  /// Whether the world is aborted. Never throws.
  bool aborted() const noexcept;
  /// The first abort's reason ("" if none).
  std::string reason() const;
  /// Aborts the world (the first reason is kept) and wakes every waiting rank. Never throws.
  void abort(const std::string& why) noexcept;
  /// Wakes every rank waiting in the segment. Never throws.
  void notify() noexcept;

 private:
  struct header;
  void open_or_create(clock::time_point deadline);
  void create(std::size_t staging);
  void open_existing(clock::time_point deadline);
  void claim();
  bool last_to_leave() const noexcept;
  void check_ranks(const std::function<bool(const rank_record&)>& ready, const std::string& during);
  std::string not_ready(const std::function<bool(const rank_record&)>& ready) const;

  std::string path_;  // for messages
  std::string shm_name_;
  std::size_t rank_;
  std::size_t world_;
  std::size_t staging_ = 0;
  clock::duration timeout_;
  int fd_ = -1;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  header* hdr_ = nullptr;
  bool claimed_ = false;
};

/// The staging bytes per rank a new segment gets: $HTP_SIM_RANK_STAGING_BYTES if set (at least
/// 64, rounded up to 64), else 16 MiB. @throws htp::invalid_argument for a malformed value.
std::size_t sim_rank_staging_bytes();

}  // namespace htp::detail
