// The slab allocator's private state and its lock-held operations. Everything here is host-side
// bookkeeping; nothing is ever stored inside the managed memory. Every member function whose name
// does not say otherwise requires `mu` to be held by the caller.
#pragma once

#include <htp/slab_allocator.hpp>

#include "slab/bitmap.hpp"
#include "slab/size_classes.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace htp {

struct slab_allocator::state {
  static constexpr std::size_t npos = slab::bitmap::npos;
  // Flags kept in the high bits of a block's recorded size (bin requests are < 512 MiB).
  static constexpr std::uint32_t flag_pending = 1u << 31;  // released after an event
  static constexpr std::uint32_t flag_dest = 1u << 30;     // reserved as a move destination
  static constexpr std::uint32_t size_mask = flag_dest - 1;

  enum class slab_kind : std::uint8_t { unavailable, free, run_head, run_body, bin };

  struct reservation {
    char* base = nullptr;
    std::size_t first = 0;  // first slab index
    std::size_t slabs = 0;
    bool ready = false;
  };
  struct bin_slab {
    std::size_t cls = 0;
    std::size_t used = 0;
    std::size_t capacity = 0;
    slab::bitmap free_blocks;          // 1 = free
    std::vector<std::uint32_t> sizes;  // requested bytes | flags, per block
    std::size_t hint = 0;              // no free block below this index
    std::size_t nonfull_pos = npos;    // position in nonfull[cls]
  };
  struct slab_record {
    slab_kind kind = slab_kind::unavailable;
    std::uint32_t flags = 0;   // run head: flag_pending / flag_dest
    std::size_t run_slabs = 0; // run head
    std::size_t requested = 0; // run head
    std::size_t head = 0;      // run body: index of the head
    std::unique_ptr<bin_slab> bin;
  };
  /// Where a live allocation is: its slab, and its block (npos for a whole-slab run).
  struct location {
    std::size_t slab = npos;
    std::size_t block = npos;
  };
  struct pending_release {
    void* ptr;
    std::size_t bytes;
    location loc;
    event_ref ev;
  };

  state(device& d, const slab_allocator_config& c);

  // ---- configuration and geometry (immutable after construction) ----------------------------
  device& dev;
  slab_allocator_config cfg;
  memory_kind kind;
  std::size_t slab_bytes;
  unsigned slab_shift;
  std::size_t total_slabs;
  std::size_t per_reservation;
  slab::size_classes classes;
  std::vector<reservation> reservations;  // by first slab; base set once ready

  // ---- bookkeeping (under mu) -----------------------------------------------------------------
  mutable std::mutex mu;
  std::condition_variable ready_cv;
  std::vector<std::pair<std::uintptr_t, std::size_t>> by_address;  // (base, reservation), sorted
  std::vector<slab_record> slabs;
  slab::bitmap used;  // 1 = not free (in use or not reserved yet): the truth for whole slabs
  std::vector<std::vector<std::size_t>> nonfull;  // per class: bin slabs with a free block
  std::vector<std::size_t> empty_cached;          // per class: one empty bin slab kept, or npos
  std::vector<pending_release> pending;
  std::vector<event_ref> event_pool;
  std::unordered_map<void*, void*> planned;  // move destination -> source

  std::size_t ready_slabs = 0, free_slabs = 0, run_slabs = 0, bin_slabs = 0;
  std::size_t slabs_peak = 0;
  std::size_t bytes_in_use = 0, bytes_peak = 0, live = 0;
  std::size_t bin_block_bytes = 0;  // block bytes of used blocks (incl. destinations)
  std::size_t full_tail_bytes = 0;  // slab tails (beyond the last block) of full bin slabs
  std::size_t pending_bytes = 0, dest_count = 0, dest_bytes = 0;
  std::uint64_t n_alloc = 0, n_free = 0, n_failed = 0, n_moves = 0;
  mutable std::size_t largest_run = 0;
  mutable bool largest_dirty = true;

  // ---- reservation / pinning ---------------------------------------------------------------
  std::thread pinner;
  bool stop_pinning = false;          // under mu
  bool reservation_done = false;      // under mu
  std::exception_ptr pin_error;       // under mu
  double pin_seconds = 0;             // under mu
  std::size_t reserved_bytes = 0;     // under mu
  std::chrono::steady_clock::time_point pin_start;

  /// Reserves every reservation with cfg.pin_threads threads. Takes mu itself, never holds it
  /// across a device call. Rethrows the first failure after the others finished.
  void reserve_all();
  /// Returns every reserved reservation to the device. Never throws. No lock needed (dtor only).
  void release_all() noexcept;
  void mark_ready(std::size_t r, char* base, double seconds);

  // ---- slabs and runs ----------------------------------------------------------------------
  std::size_t reservation_of(std::size_t slab) const noexcept;
  char* slab_address(std::size_t slab) const noexcept;
  /// Best-fit free run of n slabs inside one reservation (lowest address on ties), or npos.
  std::size_t find_run(std::size_t n) const noexcept;
  /// Highest-address free slab (bins grow from the top, runs from the bottom), or npos.
  std::size_t find_top_slab() const noexcept;
  void take_slabs(std::size_t first, std::size_t n) noexcept;
  void give_slabs(std::size_t first, std::size_t n) noexcept;
  void* take_run(std::size_t head, std::size_t n, std::size_t requested, std::uint32_t flags);
  void free_run(std::size_t head) noexcept;

  // ---- bins ----------------------------------------------------------------------------------
  /// A slab of class cls with a free block (from nonfull, the cache or a fresh slab), or npos.
  std::size_t bin_slab_for(std::size_t cls);
  std::size_t make_bin_slab(std::size_t slab, std::size_t cls);
  void* take_block(std::size_t slab, std::size_t block, std::size_t requested, std::uint32_t flags);
  std::size_t first_free_block(const bin_slab& b) const noexcept;
  void free_block(std::size_t slab, std::size_t block, bool keep_empty) noexcept;
  void nonfull_add(bin_slab& b, std::size_t slab);
  void nonfull_remove(bin_slab& b) noexcept;
  void drop_empty_slab(std::size_t slab) noexcept;
  /// Returns every cached empty bin slab to the free slabs; returns how many.
  std::size_t drop_cached_empties() noexcept;

  // ---- requests ------------------------------------------------------------------------------
  std::size_t rounded(std::size_t bytes) const noexcept;
  /// Tries to allocate; nullptr when it does not fit now. Updates counters on success.
  void* try_allocate(std::size_t bytes);
  /// Resolves a live allocation or throws invalid_argument naming the rule (state unchanged).
  location resolve(void* ptr, std::size_t bytes, const char* call) const;
  /// Frees the allocation at loc, updating counters (pending or live). Never throws.
  void free_at(const location& loc, bool keep_empty) noexcept;
  std::uint32_t flags_at(const location& loc) const noexcept;
  void set_flags(const location& loc, std::uint32_t flags) noexcept;
  std::size_t requested_at(const location& loc) const noexcept;
  std::size_t reap_locked();
  event_ref pooled_event();

  // ---- fragmentation and reports (fragmentation.cpp) ------------------------------------------
  std::size_t largest_free_run() const noexcept;
  fragmentation_report fragmentation() const noexcept;
  std::string oom_message(std::size_t bytes) const;
  fragmentation_report audit() const;
  slab_allocator_stats stats() const;

  // ---- compaction (compaction.cpp) ------------------------------------------------------------
  compaction_plan plan(const std::function<bool(const extent&)>& movable, std::size_t request);
  void plan_bins(const std::function<bool(const extent&)>& movable, compaction_plan& p);
  void plan_pack(const std::function<bool(const extent&)>& movable, compaction_plan& p);
  bool plan_window(const std::function<bool(const extent&)>& movable, std::size_t n,
                   compaction_plan& p);
  bool run_movable(std::size_t head, const std::function<bool(const extent&)>& movable) const;
  void reserve_run_dest(std::size_t head, std::size_t n, void* src, std::size_t bytes,
                        compaction_plan& p);
  void commit(const slab_move& m);
  void cancel(const slab_move& m);
  location resolve_dest(const slab_move& m, const char* call) const;
};

}  // namespace htp
