// The pager's metrics: a plain snapshot struct, exportable as JSON. Everything a benchmark or a
// serving dashboard needs to judge paging against a latency budget.
#pragma once

#include <htp/latency_histogram.hpp>
#include <htp/transfer_engine.hpp>

#include <array>
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

/// Page-fault waits, the mission's number. One sample per demand fault, and per late prefetch
/// (counted with its remaining wait): from the acquire call to the bytes being in HBM, which is when
/// the compute stream's wait on them is satisfied; making room (evictions, write-backs, waits,
/// compaction) is included. Exact quantiles over the samples since construction or
/// pager::reset_metrics() (at most 2^20 are kept; later ones count in `dropped` only).
struct fault_wait_summary {
  std::uint64_t count = 0;        ///< samples kept
  std::uint64_t dropped = 0;      ///< samples beyond the cap
  std::uint64_t bytes = 0;        ///< bytes of the faulted tensors
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0, mean_ms = 0;
  /// Total wait over total bytes, scaled to a 64 MiB page (a bytes-weighted mean: small tensors'
  /// fixed costs do not dominate it).
  double ms_per_64mib_page = 0;
  /// Each wait over its own floor (bytes / the H2D link peak): 1.0 is a wait as short as the link
  /// allows. Exact p50 / p99 over the samples; small tensors show their fixed costs here.
  double floor_multiple_p50 = 0, floor_multiple_p99 = 0;
  /// Upper bounds, in ms, of the histogram below (Prometheus's `le`; +Inf is `count`).
  static constexpr std::array<double, 14> bucket_bounds_ms{0.1, 0.25, 0.5, 1,   2.5, 5,    10,
                                                           25,  50,   100, 250, 500, 1000, 2500};
  /// Cumulative: bucket_counts[i] = samples <= bucket_bounds_ms[i].
  std::array<std::uint64_t, bucket_bounds_ms.size()> bucket_counts{};
  double sum_ms = 0;  ///< all kept samples added up.
};

/// A snapshot of a pager's metrics. Counters are since construction or the last reset_metrics()
/// (`transfers` is always since construction: the engine's own counters).
struct pager_metrics {
  double elapsed_ms = 0;
  std::uint64_t latency_budget_ms = 0;

  tier_occupancy hbm;
  tier_occupancy host;

  std::uint64_t registered_tensors = 0;
  /// Of them, device-resident tensors (register_resident): in HBM for life, no host copy.
  std::uint64_t device_resident_tensors = 0;
  std::uint64_t device_resident_bytes = 0;  ///< their requested bytes.
  std::uint64_t file_backed_tensors = 0;    ///< registered with register_file_tensor (no host copy).
  std::uint64_t file_backed_bytes = 0;      ///< their requested bytes.
  std::uint64_t caller_host_bytes = 0;  ///< caller memory lent with add_host_region (not htp's).
  std::uint64_t events_created = 0;     ///< device events the pager created (recycled, so bounded).
  /// acquires == hits + faults + degraded_acquires + failed_acquires + oom.thrown.
  std::uint64_t acquires = 0;
  std::uint64_t hits = 0;               ///< acquires that found the tensor resident or loading.
  std::uint64_t faults = 0;             ///< acquires that had to start a page-in.
  std::uint64_t failed_acquires = 0;    ///< acquires that threw a device error (copy failed, ...).
  std::uint64_t failed_loads = 0;       ///< page-ins that failed (the host copy stays authoritative).
  double fault_rate_per_ms = 0;         ///< faults / elapsed_ms.
  latency_summary fault_latency;        ///< a fault's copy alone: submission to bytes in HBM (histogram).
  fault_wait_summary fault_wait;        ///< acquire call to bytes usable, faults and late prefetches.
  /// Host time acquire calls spent blocked: the ladder's waits (write-backs, copies in flight) and
  /// acquire(..., wait = true). Near zero when eviction and loads are ordered on the device.
  std::uint64_t host_blocked_ns = 0;
  std::uint64_t page_ins = 0;           ///< H2D loads started (faults + prefetches).
  std::uint64_t page_in_bytes = 0;

  std::uint64_t prefetches = 0;         ///< prefetch loads started.
  std::uint64_t prefetch_hits = 0;      ///< first acquire found the prefetched tensor complete.
  std::uint64_t late_prefetches = 0;    ///< first acquire found the prefetch still in flight.
  std::uint64_t wasted_prefetches = 0;  ///< prefetched tensors evicted before any acquire.
  std::uint64_t prefetch_skipped = 0;   ///< prefetch hints dropped for lack of room.

  std::uint64_t evictions = 0;
  /// Evictions of tensors whose load was still in flight (acquired and released meanwhile),
  /// ordered after the load on the device instead of waited for on the host. Part of `evictions`.
  std::uint64_t evictions_in_flight = 0;
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
