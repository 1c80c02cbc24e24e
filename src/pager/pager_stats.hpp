// The pager's statistics: one component that owns its counters, fault-wait samples, fault
// latency histogram, HBM occupancy over time and trace spans. It observes: the tensor table
// reports each transition here (a load started, a tensor evicted, a copy finished) and the
// pager's policy reports its own events (an acquire's outcome, a rung of the ladder), so no
// counting is woven into the state machine. The counters are described once, in
// HTP_PAGER_COUNTERS (include/htp/metrics.hpp). Not thread-safe: the pager's mutex guards it.
#pragma once

#include <htp/latency_histogram.hpp>
#include <htp/metrics.hpp>

#include "pager/decision_log.hpp"
#include "pager/trace.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace htp::detail {

struct tensor_record;

/// One page-fault wait (see fault_wait_summary).
struct fault_wait_sample {
  std::uint64_t ns;
  std::uint64_t bytes;
};

/// How one element of an acquire ended (counted once the whole call succeeds).
enum class acquire_outcome {
  hit,
  prefetch_hit,
  late_prefetch,
  fault,
  degraded,      // shares a degraded (zero-copy) acquire already in place
  degraded_oom,  // the ladder's rung 5 served it zero-copy
};

class pager_stats {
 public:
  using clock = std::chrono::steady_clock;
  /// `trace_capacity` > 0 keeps a trace of that many spans (pager_config::trace).
  explicit pager_stats(std::size_t trace_capacity);

  // ---- what the tensor table reports -----------------------------------------------------------
  void registered(const tensor_record& t);
  void unregistered(const tensor_record& t);
  void placed_resident(const tensor_record& t);
  void load_started(const tensor_record& t);
  void load_failed() { ++counters_.failed_loads; }
  void write_back_started(const tensor_record& t);
  /// An eviction (a write-back counts as one too); `in_flight`: its load was still running.
  void evicted(const tensor_record& t, bool in_flight);
  void move_started(const tensor_record& t, std::size_t bytes);

  // ---- completions -----------------------------------------------------------------------------
  /// A copy of `t` finished (its pending kind still set); `latency` when it succeeded. Records the
  /// fault latency and the trace span.
  void copy_finished(const tensor_record& t, std::optional<std::chrono::nanoseconds> latency);
  /// A load detached from its tensor finished (`ok`), started at `started` for `bytes`.
  void detached_load_finished(bool ok, bool fault_load, clock::time_point wait_from,
                              clock::time_point started, std::chrono::nanoseconds latency,
                              std::size_t bytes, const std::string& traced_name);
  /// One fault wait of a tensor of `bytes`, from `from` (an acquire call) to `to` (its bytes
  /// usable); nothing when `from` is unset ({}).
  void fault_wait(clock::time_point from, clock::time_point to, std::size_t bytes);
  /// `prefetches` late prefetches (by the acquire call) the compute stream waited `stall` for
  /// (device time, wait_probes.hpp).
  void prefetch_stall(std::uint32_t prefetches, std::chrono::nanoseconds stall);
  /// The share of prefetched tensors the compute stream did not wait for (pager_metrics).
  static double timely_share(const pager_metrics& m) noexcept;

  // ---- what the pager's policy reports ---------------------------------------------------------
  /// Adds `n` to a plain counter (an event count of HTP_PAGER_COUNTERS).
  void add(std::uint64_t pager_metrics::*counter, std::uint64_t n = 1) { counters_.*counter += n; }
  /// A rung of the out-of-memory ladder was used.
  void rung(std::uint64_t oom_ladder_counts::*r) { ++(counters_.oom.*r); }
  /// Host time a registration spent encoding a compressed weight.
  void encoded(std::uint64_t ns) { counters_.encode_ns += ns; }
  /// Adds (sign 1) or takes back (sign -1) an acquire outcome; taking back never wraps.
  void outcome(acquire_outcome o, int sign);
  /// Host time an acquire spent blocked from `from` until now.
  void blocked_since(clock::time_point from);
  /// The last pin of `t` was released (the trace's host_acquired span).
  void released(const tensor_record& t);
  /// A caller's compute span, for the trace.
  void compute_span(const std::string& name, clock::time_point begin, clock::time_point end);
  bool tracing() const noexcept { return trace_ != nullptr; }
  trace_log* trace() noexcept { return trace_.get(); }

  // ---- occupancy, snapshot, reset --------------------------------------------------------------
  /// Accounts HBM occupancy (`held` of `capacity` bytes) up to now.
  void sample_occupancy(std::size_t held, std::size_t capacity);
  /// The counters (levels kept, events zeroed), samples, histogram, trace and occupancy start
  /// afresh; `held` of `capacity` bytes are in HBM now.
  void reset(std::size_t held, std::size_t capacity);
  /// The counters, latency summary, fault rate and elapsed time; the caller fills occupancy and
  /// transfers. fault_wait is left empty (summarize it from fault_waits() outside the lock).
  pager_metrics snapshot() const;
  double hbm_peak_pct() const noexcept { return hbm_peak_pct_; }
  double hbm_mean_pct() const;
  const std::vector<fault_wait_sample>& fault_waits() const noexcept { return fault_waits_; }
  std::uint64_t fault_waits_dropped() const noexcept { return fault_waits_dropped_; }
  const pager_metrics& counters() const noexcept { return counters_; }
  /// Exact quantiles of `samples` (any thread, no lock needed); `peak` = H2D link bytes/s.
  static fault_wait_summary summarize(const std::vector<fault_wait_sample>& samples,
                                      std::uint64_t dropped, double peak);
  /// Nanoseconds from `from` to `to`, 0 if `to` is earlier.
  static std::uint64_t ns_between(clock::time_point from, clock::time_point to) noexcept;

 private:
  static constexpr std::size_t fault_wait_cap = std::size_t{1} << 20;
  clock::time_point start_ = clock::now();
  pager_metrics counters_;  // the HTP_PAGER_COUNTERS fields and the ladder's rungs
  latency_histogram fault_latency_;
  latency_histogram prefetch_lateness_;  // late prefetches: the compute stream's stall (device)
  std::vector<fault_wait_sample> fault_waits_;  // since the last reset, at most fault_wait_cap
  std::uint64_t fault_waits_dropped_ = 0;
  std::unique_ptr<trace_log> trace_;
  decision_log decisions_;
  clock::time_point last_sample_ = start_;
  double hbm_occupancy_integral_ = 0;  // pct x seconds
  double hbm_peak_pct_ = 0;
};

}  // namespace htp::detail
