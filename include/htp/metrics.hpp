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
  std::size_t used_bytes = 0;    ///< bytes of live extents now (requested sizes).
  double occupancy_pct = 0;      ///< used / capacity now.
  double peak_pct = 0;           ///< highest occupancy seen.
  double mean_pct = 0;           ///< time-weighted mean since the pager started (or reset).
  double fragmentation_pct = 0;  ///< combined fragmentation (docs/slab_allocator.md).
  std::size_t largest_free_extent_bytes = 0;
};

/// The rungs of the out-of-memory ladder (see pager.hpp), described once: X(field, help). The
/// struct below, to_json, the Prometheus exporter and metrics_delta are generated from it.
#define HTP_OOM_LADDER_RUNGS(X)                                         \
  X(evict_clean, "rung 1: clean tensors evicted to make room")          \
  X(write_back_dirty, "rung 2: dirty tensors written back and evicted") \
  X(wait_in_flight, "rung 3: waits for releases or copies in flight")   \
  X(compact, "rung 4: compactions run for a request")                   \
  X(degraded, "rung 5: acquires served from mapped host memory")        \
  X(thrown, "rung 6: out_of_memory thrown")

/// Uses of each rung of the out-of-memory ladder.
struct oom_ladder_counts {
#define HTP_RUNG_FIELD(field, help) std::uint64_t field = 0;
  HTP_OOM_LADDER_RUNGS(HTP_RUNG_FIELD)
#undef HTP_RUNG_FIELD
};

/// What a counter of HTP_PAGER_COUNTERS measures (see there).
enum class counter_kind { level, count, count_ns };

/// The pager's plain counters, described once: X(field, kind, help). Kinds: `level`, what is
/// registered now (reset_metrics keeps it; a Prometheus gauge); `count`, events since the pager
/// started or was reset (a Prometheus counter, htp_<field>_total); `count_ns`, a count of
/// nanoseconds (exported as htp_<field without _ns>_seconds_total). pager_metrics, to_json, the
/// Prometheus exporter, reset_metrics and metrics_delta are generated from this list.
#define HTP_PAGER_COUNTERS(X)                                                                    \
  X(registered_tensors, level, "Tensors registered with the pager.")                             \
  X(device_resident_tensors, level,                                                              \
    "Of them, device-resident tensors (register_resident): in HBM for life, no host copy.")      \
  X(device_resident_bytes, level, "Requested bytes of the device-resident tensors.")             \
  X(file_backed_tensors, level, "Tensors registered with register_file_tensor (no host copy).")  \
  X(file_backed_bytes, level, "Requested bytes of the file-backed tensors.")                     \
  X(compressed_tensors, level,                                                                   \
    "Weights stored compressed (register_tensor with a weight_format, "                          \
    "register_compressed_file_tensor).")                                                         \
  X(compressed_bytes, level, "Logical (decoded) bytes of the compressed tensors.")               \
  X(compressed_wire_bytes, level,                                                                \
    "Wire bytes of the compressed tensors: what their host extents or files hold.")              \
  X(encode_ns, count_ns, "Host time register_tensor spent encoding weights (caller's thread).")  \
  X(acquires, count,                                                                             \
    "Tensor acquires; acquires == hits + faults + activation_fresh_acquires + "                  \
    "degraded_acquires + failed_acquires + oom_ladder.thrown.")                                  \
  X(hits, count, "Acquires that found the tensor resident or loading.")                          \
  X(faults, count, "Acquires that had to start a page-in (page faults).")                        \
  X(failed_acquires, count, "Acquires that threw a device error (copy failed, ...).")            \
  X(failed_loads, count, "Page-ins that failed (the host copy stays authoritative).")            \
  X(corrupt_page_ins, count,                                                                     \
    "Of them, page-ins that failed their verification (pager_config::verify_page_ins): the "     \
    "file or compressed copy changed after registration.")                                       \
  X(host_blocked_ns, count_ns,                                                                   \
    "Host time acquire calls spent blocked: the out-of-memory ladder's waits and acquire(..., "  \
    "wait = true). Near zero when eviction and loads are ordered on the device.")                \
  X(page_ins, count, "Host-to-device loads started (faults and prefetches).")                    \
  X(page_in_bytes, count, "Bytes of the loads started (logical: what lands in HBM).")            \
  X(page_in_wire_bytes, count,                                                                   \
    "Bytes the loads started move over the link: page_in_bytes, with a compressed tensor "       \
    "counted at its wire size.")                                                                 \
  X(prefetches, count, "Prefetch loads started.")                                                \
  X(prefetch_hits, count, "First acquires that found their prefetched tensor complete.")         \
  X(late_prefetches, count, "First acquires that found their prefetch still in flight.")         \
  X(prefetches_on_time, count,                                                                   \
    "Of the late prefetches, those the compute stream did not wait for: its device-timed stall " \
    "at the acquire was at most 20 us (the host called acquire early, the GPU came later).")     \
  X(wasted_prefetches, count, "Prefetched tensors evicted before any acquire.")                  \
  X(prefetch_skipped, count, "Prefetch hints dropped for lack of room.")                         \
  X(evictions, count, "Tensors evicted from HBM.")                                               \
  X(evictions_in_flight, count,                                                                  \
    "Evictions of tensors whose load was still in flight (acquired and released meanwhile), "    \
    "ordered after the load on the device instead of waited for on the host. Part of "           \
    "evictions.")                                                                                \
  X(write_backs, count, "Dirty tensors written back to host memory.")                            \
  X(write_back_bytes, count, "Bytes written back.")                                              \
  X(compactions, count, "HBM compaction runs.")                                                  \
  X(compaction_moves, count, "Tensors moved by compaction.")                                     \
  X(compaction_bytes, count, "Bytes moved by compaction.")                                       \
  X(degraded_acquires, count,                                                                    \
    "Acquires served from mapped host memory because HBM was full of pinned tensors.")           \
  X(activation_fresh_acquires, count,                                                            \
    "Acquires of a dead activation: HBM allocated, nothing copied in (not a fault).")            \
  X(activation_dead_releases, count,                                                             \
    "release_last_use calls: activations whose content died, their HBM freed unwritten.")        \
  X(activation_discards, count,                                                                  \
    "discard calls that killed a live activation's content without a use: its HBM freed "        \
    "unwritten, its host copy stale.")                                                           \
  X(activation_write_back_bytes, count,                                                          \
    "Of write_back_bytes, those of live activations evicted before their last use.")

/// Page-fault waits, the mission's number. One sample per demand fault, and per late prefetch
/// (counted with its remaining wait): from the acquire call to the bytes being in HBM, which is
/// when the compute stream's wait on them is satisfied; making room (evictions, write-backs, waits,
/// compaction) is included. Exact quantiles over the samples since construction or
/// pager::reset_metrics() (at most 2^20 are kept; later ones count in `dropped` only).
struct fault_wait_summary {
  std::uint64_t count = 0;    ///< samples kept
  std::uint64_t dropped = 0;  ///< samples beyond the cap
  std::uint64_t bytes = 0;    ///< bytes of the faulted tensors
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

  /// The counters of HTP_PAGER_COUNTERS, one field each (their help text is the doc).
#define HTP_COUNTER_FIELD(field, kind, help) std::uint64_t field = 0;
  HTP_PAGER_COUNTERS(HTP_COUNTER_FIELD)
#undef HTP_COUNTER_FIELD

  std::uint64_t caller_host_bytes = 0;  ///< caller memory lent with add_host_region (not htp's).
  std::uint64_t events_created = 0;     ///< device events the pager created (recycled, so bounded).
  double fault_rate_per_ms = 0;         ///< faults / elapsed_ms.
  latency_summary fault_latency;  ///< a fault's copy alone: submission to bytes in HBM (histogram).
  fault_wait_summary fault_wait;  ///< acquire call to bytes usable, faults and late prefetches.
  /// Prefetch timeliness: (prefetch_hits + prefetches_on_time) / (prefetch_hits +
  /// late_prefetches), the share of prefetched tensors the compute stream found complete when it
  /// reached their first acquire (1 when there were none). Measured on the device: a host that runs
  /// ahead of its GPU calls acquire before most loads end, yet the GPU may never wait.
  double prefetch_timely_share = 1;
  /// How long the compute stream waited at the first acquire of each prefetch it did wait for
  /// (device time, one sample per such prefetch).
  latency_summary prefetch_lateness;

  oom_ladder_counts oom;
  transfer_metrics transfers;  ///< bytes per direction, GB/s, utilisation, token waits.
};

/// Walks a snapshot in the names and nesting to_json writes: `v.number(name, value)` for each
/// field (value a std::uint64_t or a double), `v.open(name)` ... `v.close()` around each nested
/// object. Every writer of the nested form walks this one list (to_json here; Python's
/// Pager.metrics() builds its dict with it), so each field is named once. Thread-safe (reads `m`).
template <typename V>
void visit_metrics(const pager_metrics& m, V&& v);

/// The metrics as a JSON object (stable field names, as in this header). Thread-safe (a pure
/// function); throws nothing but std::bad_alloc.
std::string to_json(const pager_metrics& m);

/// What happened between two snapshots of one pager, `earlier` taken before `later`: the
/// `count` and `count_ns` counters and the ladder's rungs as differences (0 where reset_metrics ran
/// in between and a counter went back), elapsed_ms as the difference, fault_rate_per_ms and
/// prefetch_timely_share over them;
/// everything else (levels, occupancy, latency summaries, transfers) as `later` has it.
/// Thread-safe (a pure function); throws nothing.
pager_metrics metrics_delta(const pager_metrics& later, const pager_metrics& earlier) noexcept;

namespace detail {

template <typename V>
void visit_latency(const char* name, const latency_summary& s, V& v) {
  v.open(name);
  v.number("count", s.count);
  v.number("p50_ns", s.p50_ns);
  v.number("p95_ns", s.p95_ns);
  v.number("p99_ns", s.p99_ns);
  v.number("max_ns", s.max_ns);
  v.number("mean_ns", s.mean_ns);
  v.close();
}

template <typename V>
void visit_occupancy(const char* name, const tier_occupancy& o, V& v) {
  v.open(name);
  v.number("capacity_bytes", std::uint64_t{o.capacity_bytes});
  v.number("used_bytes", std::uint64_t{o.used_bytes});
  v.number("occupancy_pct", o.occupancy_pct);
  v.number("peak_pct", o.peak_pct);
  v.number("mean_pct", o.mean_pct);
  v.number("fragmentation_pct", o.fragmentation_pct);
  v.number("largest_free_extent_bytes", std::uint64_t{o.largest_free_extent_bytes});
  v.close();
}

template <typename V>
void visit_direction(const char* name, const transfer_direction_metrics& d, V& v) {
  v.open(name);
  v.number("bytes", d.bytes);
  v.number("chunks", d.chunks);
  v.number("busy_ns", d.busy_ns);
  v.number("achieved_gbps", d.achieved_gbps);
  v.number("utilization", d.utilization);
  v.number("token_wait_ns", d.token_wait_ns);
  v.number("rate_cap_bytes_per_second", d.rate_cap_bytes_per_second);
  v.number("link_peak_bytes_per_second", d.link_peak_bytes_per_second);
  v.close();
}

template <typename V>
void visit_fault_wait(const fault_wait_summary& w, V& v) {
  v.open("fault_wait");
  v.number("count", std::uint64_t{w.count});
  v.number("dropped", w.dropped);
  v.number("bytes", w.bytes);
  v.number("p50_ms", w.p50_ms);
  v.number("p90_ms", w.p90_ms);
  v.number("p99_ms", w.p99_ms);
  v.number("max_ms", w.max_ms);
  v.number("mean_ms", w.mean_ms);
  v.number("ms_per_64mib_page", w.ms_per_64mib_page);
  v.number("floor_multiple_p50", w.floor_multiple_p50);
  v.number("floor_multiple_p99", w.floor_multiple_p99);
  v.close();
}

template <typename V>
void visit_transfers(const transfer_metrics& t, V& v) {
  v.open("transfers");
  visit_direction("h2d", t.h2d, v);
  visit_direction("d2h", t.d2h, v);
  visit_direction("d2d", t.d2d, v);
  v.open("classes");
  for (std::size_t i = 0; i < transfer_priority_count; ++i) {
    const transfer_class_metrics& c = t.classes[i];
    v.open(to_string(static_cast<transfer_priority>(i)));
    v.number("queue_depth", c.queue_depth);
    v.number("submitted", c.submitted);
    v.number("completed", c.completed);
    v.number("cancelled", c.cancelled);
    v.number("failed", c.failed);
    visit_latency("latency", c.latency, v);
    v.close();
  }
  v.close();
  v.number("elapsed_ns", t.elapsed_ns);
  v.close();
}

}  // namespace detail

template <typename V>
void visit_metrics(const pager_metrics& m, V&& v) {
  v.number("elapsed_ms", m.elapsed_ms);
  v.number("latency_budget_ms", m.latency_budget_ms);
  detail::visit_occupancy("hbm", m.hbm, v);
  detail::visit_occupancy("host", m.host, v);
  v.number("caller_host_bytes", std::uint64_t{m.caller_host_bytes});
  v.number("events_created", std::uint64_t{m.events_created});
  v.number("fault_rate_per_ms", m.fault_rate_per_ms);
  detail::visit_latency("fault_latency", m.fault_latency, v);
  v.number("prefetch_timely_share", m.prefetch_timely_share);
  detail::visit_latency("prefetch_lateness", m.prefetch_lateness, v);
  detail::visit_fault_wait(m.fault_wait, v);
  detail::visit_transfers(m.transfers, v);
#define HTP_VISIT_COUNTER(field, kind, help) v.number(#field, std::uint64_t{m.field});
  HTP_PAGER_COUNTERS(HTP_VISIT_COUNTER)
#undef HTP_VISIT_COUNTER
  v.open("oom_ladder");
#define HTP_VISIT_RUNG(field, help) v.number(#field, m.oom.field);
  HTP_OOM_LADDER_RUNGS(HTP_VISIT_RUNG)
#undef HTP_VISIT_RUNG
  v.close();
}

}  // namespace htp
