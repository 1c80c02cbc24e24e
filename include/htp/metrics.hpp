// The pager's metrics: a plain snapshot struct, exportable as JSON. Everything a benchmark or a
// serving dashboard needs to judge paging against a latency budget.
#pragma once

#include <htp/latency_histogram.hpp>
#include <htp/transfer_engine.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace htp {

/// Occupancy of one memory tier.
struct tier_occupancy {
  std::size_t capacity_bytes = 0;
  std::size_t used_bytes = 0;     ///< bytes of live extents now (requested sizes).
  double occupancy_pct = 0;       ///< used / capacity now.
  double peak_pct = 0;            ///< highest occupancy seen.
  double mean_pct = 0;            ///< time-weighted mean since the pager started (or reset).
  double fragmentation_pct = 0;   ///< combined fragmentation (docs/slab_allocator.md).
  std::size_t largest_free_extent_bytes = 0;
};

/// Uses of each rung of the out-of-memory ladder (see pager.hpp).
struct oom_ladder_counts {
  std::uint64_t evict_clean = 0;       ///< rung 1: clean tensors evicted to make room.
  std::uint64_t write_back_dirty = 0;  ///< rung 2: dirty tensors written back and evicted.
  std::uint64_t wait_in_flight = 0;    ///< rung 3: waits for releases or copies in flight.
  std::uint64_t compact = 0;           ///< rung 4: compactions run for a request.
  std::uint64_t degraded = 0;          ///< rung 5: acquires served from mapped host memory.
  std::uint64_t thrown = 0;            ///< rung 6: out_of_memory thrown.
};

/// A snapshot of a pager's metrics. Counters are since construction.
struct pager_metrics {
  double elapsed_ms = 0;
  std::uint64_t latency_budget_ms = 0;

  tier_occupancy hbm;
  tier_occupancy host;

  std::uint64_t registered_tensors = 0;
  std::uint64_t caller_host_bytes = 0;  ///< caller memory lent with add_host_region (not htp's).
  std::uint64_t events_created = 0;     ///< device events the pager created (recycled, so bounded).
  /// acquires == hits + faults + degraded_acquires + failed_acquires + oom.thrown.
  std::uint64_t acquires = 0;
  std::uint64_t hits = 0;               ///< acquires that found the tensor resident or loading.
  std::uint64_t faults = 0;             ///< acquires that had to start a page-in.
  std::uint64_t failed_acquires = 0;    ///< acquires that threw a device error (copy failed, ...).
  std::uint64_t failed_loads = 0;       ///< page-ins that failed (the host copy stays authoritative).
  double fault_rate_per_ms = 0;         ///< faults / elapsed_ms.
  latency_summary fault_latency;        ///< fault submission to bytes in HBM.
  std::uint64_t page_ins = 0;           ///< H2D loads started (faults + prefetches).
  std::uint64_t page_in_bytes = 0;

  std::uint64_t prefetches = 0;         ///< prefetch loads started.
  std::uint64_t prefetch_hits = 0;      ///< first acquire found the prefetched tensor complete.
  std::uint64_t late_prefetches = 0;    ///< first acquire found the prefetch still in flight.
  std::uint64_t wasted_prefetches = 0;  ///< prefetched tensors evicted before any acquire.
  std::uint64_t prefetch_skipped = 0;   ///< prefetch hints dropped for lack of room.

  std::uint64_t evictions = 0;
  std::uint64_t write_backs = 0;
  std::uint64_t write_back_bytes = 0;
  std::uint64_t compactions = 0;        ///< compaction runs.
  std::uint64_t compaction_moves = 0;
  std::uint64_t compaction_bytes = 0;
  std::uint64_t degraded_acquires = 0;

  oom_ladder_counts oom;
  transfer_metrics transfers;           ///< bytes per direction, GB/s, utilisation, token waits.
};

/// The metrics as a JSON object (stable field names, as in this header).
std::string to_json(const pager_metrics& m);

}  // namespace htp
