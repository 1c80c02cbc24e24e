// The slab allocator's private state and its lock-held operations. Everything here is host-side
// bookkeeping; nothing is ever stored inside the managed memory. Every member function whose name
// does not say otherwise requires `mu` to be held by the caller. Geometry: the budget is reserved
// in reservations of whole slabs; all space is handed out in pages (see docs/slab_allocator.md).
#pragma once

#include <htp/slab_allocator.hpp>

#include "slab/bitmap.hpp"
#include "slab/free_index.hpp"
#include "slab/page_record.hpp"
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
  static constexpr std::uint32_t none = slab::free_index::none;
  // Run-head flags (page_record::flags).
  static constexpr std::uint8_t run_pending = 1;  // released after an event
  static constexpr std::uint8_t run_dest = 2;     // reserved as a move destination
  // Flags kept in the high bits of a bin block's recorded size (bin requests are < 512 MiB).
  static constexpr std::uint32_t flag_pending = 1u << 31;
  static constexpr std::uint32_t flag_dest = 1u << 30;
  static constexpr std::uint32_t size_mask = flag_dest - 1;

  struct reservation {
    char* base = nullptr;
    std::size_t first = 0;  // first page index
    std::size_t pages = 0;
    bool ready = false;
  };
  /// A page dedicated to one size class.
  struct bin_page {
    std::size_t cls = 0;
    std::size_t page = npos;
    std::size_t used = 0;
    std::size_t capacity = 0;
    slab::bitmap free_blocks;          // 1 = free
    std::vector<std::uint32_t> sizes;  // requested bytes | flags, per block
    std::size_t hint = 0;              // no free block below this index
    std::size_t nonfull_pos = npos;    // position in nonfull[cls]
    bool evacuating = false;           // a compaction source: off nonfull, takes no new block
  };
  /// Where a live allocation is: its page, and its block (npos for a run of pages).
  struct location {
    std::size_t page = npos;
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
  std::size_t page_bytes;
  unsigned page_shift;
  std::size_t total_pages;
  std::size_t per_reservation;  // pages per reservation (whole slabs)
  slab::size_classes classes;
  std::vector<reservation> reservations;  // by first page; base set once ready

  // ---- bookkeeping (under mu) -----------------------------------------------------------------
  mutable std::mutex mu;
  std::condition_variable ready_cv;
  std::vector<std::pair<std::uintptr_t, std::size_t>> by_address;  // (base, reservation), sorted
  std::vector<slab::page_record> pages;
  slab::free_index free_runs{pages};
  std::vector<bin_page> bins;  // slots; a page's record names its slot
  std::vector<std::size_t> free_bin_slots;
  std::vector<std::vector<std::size_t>> nonfull;  // per class: bin pages with a free block
  std::vector<std::size_t> empty_cached;          // per class: one empty bin page kept, or npos
  std::vector<pending_release> pending;
  std::vector<event_ref> event_pool;
  std::unordered_map<void*, void*> planned;  // move destination -> source

  std::size_t ready_pages = 0, free_pages = 0, run_pages = 0, bin_pages = 0;
  std::size_t pages_peak = 0;
  std::size_t bytes_in_use = 0, bytes_peak = 0, live = 0;
  std::size_t bin_block_bytes = 0;  // block bytes of used blocks (incl. destinations)
  std::size_t full_tail_bytes = 0;  // page tails (beyond the last block) of full bin pages
  std::size_t pending_bytes = 0, dest_count = 0, dest_bytes = 0;
  std::uint64_t n_alloc = 0, n_free = 0, n_failed = 0, n_moves = 0;
  mutable std::size_t largest_run = 0;
  mutable bool largest_dirty = true;

  // ---- reservation / pinning ---------------------------------------------------------------
  std::thread pinner;
  bool stop_pinning = false;       // under mu
  bool reservation_done = false;   // under mu
  std::exception_ptr pin_error;    // under mu
  double pin_seconds = 0;          // under mu
  std::size_t reserved_bytes = 0;  // under mu
  std::chrono::steady_clock::time_point pin_start;

  /// Reserves every reservation with cfg.pin_threads threads. Takes mu itself, never holds it
  /// across a device call. Rethrows the first failure after the others finished.
  void reserve_all();
  /// Returns every reserved reservation to the device. Never throws. No lock needed (dtor only).
  void release_all() noexcept;
  void mark_ready(std::size_t r, char* base, double seconds);

  // ---- pages and runs ----------------------------------------------------------------------
  std::size_t reservation_of(std::size_t page) const noexcept { return page / per_reservation; }
  char* page_address(std::size_t page) const noexcept;
  std::size_t pages_for(std::size_t bytes) const noexcept {
    return (bytes + page_bytes - 1) >> page_shift;
  }
  /// Takes n pages out of the free run starting at `start` (its low end, or its high end when
  /// `from_top`); the rest stays free. Returns the first page taken.
  std::size_t take_free(std::size_t start, std::size_t n, bool from_top) noexcept;
  /// Returns pages [first, first + n) to the free runs, merging with free neighbours.
  void give_pages(std::size_t first, std::size_t n) noexcept;
  void* take_run(std::size_t head, std::size_t n, std::size_t requested,
                 std::uint8_t flags) noexcept;
  void free_run(std::size_t head) noexcept;
  std::size_t run_requested(std::size_t head) const noexcept {
    return ((pages[head].len - std::size_t{1}) << page_shift) + pages[head].b;
  }

  // ---- bins ----------------------------------------------------------------------------------
  bin_page& bin_of(std::size_t page) noexcept { return bins[pages[page].b]; }
  const bin_page& bin_of(std::size_t page) const noexcept { return bins[pages[page].b]; }
  /// A page of class cls with a free block (from nonfull, the cache or a fresh page), or npos.
  std::size_t bin_page_for(std::size_t cls);
  std::size_t make_bin_page(std::size_t page, std::size_t cls);
  void* take_block(std::size_t page, std::size_t block, std::size_t requested, std::uint32_t flags);
  std::size_t first_free_block(const bin_page& b) const noexcept;
  void free_block(std::size_t page, std::size_t block, bool keep_empty) noexcept;
  void nonfull_add(bin_page& b);
  void nonfull_remove(bin_page& b) noexcept;
  void drop_empty_page(std::size_t page) noexcept;
  /// Returns every cached empty bin page to the free pages; returns how many.
  std::size_t drop_cached_empties() noexcept;

  // ---- requests ------------------------------------------------------------------------------
  bool is_run_request(std::size_t bytes) const noexcept { return bytes * 2 >= page_bytes; }
  std::size_t rounded(std::size_t bytes) const noexcept { return classes.rounded(bytes); }
  /// Tries to allocate; nullptr when it does not fit now. Updates counters on success.
  void* try_allocate(std::size_t bytes);
  /// Resolves a live allocation or throws invalid_argument naming the rule (state unchanged).
  location resolve(void* ptr, std::size_t bytes, const char* call) const;
  /// Frees the allocation at loc, updating counters (pending or live). Never throws.
  void free_at(const location& loc, bool keep_empty) noexcept;
  std::uint32_t flags_at(const location& loc) const noexcept;  // as bin flags
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
  /// plan_pack, or plan_evacuate when packing moves nothing.
  void plan_gather(const std::function<bool(const extent&)>& movable, compaction_plan& p);
  /// Plans freeing the top of each reservation in one step; false when it gains nothing.
  bool plan_evacuate(const std::function<bool(const extent&)>& movable, compaction_plan& p);
  /// Plans moving every block of bin page `from` to the same block of a new page of its class at
  /// free page `to` (already taken out of the free runs).
  void relocate_bin_page(std::size_t from, std::size_t to, compaction_plan& p);
  bool bin_page_movable(std::size_t page, const std::function<bool(const extent&)>& movable) const;
  bool plan_window(const std::function<bool(const extent&)>& movable, std::size_t n,
                   compaction_plan& p);
  /// The longest free run once every planned move has committed (its sources freed).
  std::size_t longest_run_after(const compaction_plan& p) const;
  bool run_movable(std::size_t head, const std::function<bool(const extent&)>& movable) const;
  void reserve_run_dest(std::size_t head, std::size_t n, void* src, std::size_t bytes,
                        compaction_plan& p);
  /// Books a planned move whose destination is already reserved: the planned map, the
  /// destination counters and the plan.
  void record_move(void* from, void* to, std::size_t bytes, compaction_plan& p);
  /// Plans moving the item (a run or a whole bin page) starting at page `head` to free pages
  /// starting at `dest`, already taken out of the free runs.
  void move_item(std::size_t head, std::size_t dest, compaction_plan& p);
  /// Marks a bin page as a compaction source: off the non-full list, it takes no new block and is
  /// freed when its last block moves out.
  void evacuate(std::size_t page) noexcept;
  void commit(const slab_move& m);
  void cancel(const slab_move& m);
  location locate(const void* ptr) const noexcept;
  location resolve_dest(const slab_move& m, const char* call) const;
};

}  // namespace htp
