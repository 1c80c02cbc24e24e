// The pager's statistics: an observer (observer.hpp) that owns the counters, fault-wait samples,
// fault latency histogram, HBM occupancy over time and trace spans. It only watches: each event
// it is told (a transition of the tensor table, a decision of a policy, a call that ended) is
// counted here, once, and nothing it holds steers the pager. The counters are described once, in
// HTP_PAGER_COUNTERS (include/htp/metrics.hpp). Not thread-safe: the pager's mutex guards it.
#pragma once

#include <htp/latency_histogram.hpp>
#include <htp/metrics.hpp>

#include "pager/observer.hpp"
#include "pager/trace.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace htp::detail {

/// One page-fault wait (see fault_wait_summary).
struct fault_wait_sample {
  std::uint64_t ns;
  std::uint64_t bytes;
};

class pager_stats final : public pager_observer {
 public:
  /// `trace_capacity` > 0 keeps a trace of that many spans (pager_config::trace).
  explicit pager_stats(std::size_t trace_capacity);

  // ---- what it observes (observer.hpp) ---------------------------------------------------------
  void registered(const tensor_record& t) override;
  void unregistered(const tensor_record& t) override;
  void placed_resident(const tensor_record& t) override;
  void load_started(const tensor_record& t, transfer_priority priority) override;
  void load_finished(const tensor_record& t, transfer_ticket ticket, clock::time_point at,
                     std::chrono::nanoseconds latency) override;
  void load_failed(const tensor_record& t, transfer_ticket ticket,
                   const std::exception_ptr& why) override;
  void evicted(const tensor_record& t, eviction how, cause why) override;
  void copy_finished(const tensor_record& t, bool ok, std::chrono::nanoseconds latency) override;
  void move_started(const tensor_record& t) override;
  void last_release(const tensor_record& t) override;
  void last_use(const tensor_record& t) override;
  void discarded(const tensor_record& t) override;
  void detached_load_finished(transfer_ticket ticket, bool ok, bool fault,
                              clock::time_point started, std::chrono::nanoseconds latency,
                              std::size_t bytes, const std::string& name) override;
  void ladder_waited() override { ++counters_.oom.wait_in_flight; }
  void ladder_exhausted(std::size_t) override { ++counters_.oom.thrown; }
  void compaction_started(std::size_t moves, cause why) override;
  void prefetch_skipped(const tensor_record&) override { ++counters_.prefetch_skipped; }
  void prefetches_on_time(std::uint32_t n) override { counters_.prefetches_on_time += n; }
  void prefetches_late(std::uint32_t n, std::chrono::nanoseconds stall) override;
  void acquire_succeeded(const acquired_element* elements, std::size_t n,
                         clock::time_point called) override;
  void acquire_failed(std::size_t n, bool exhausted) override;
  void blocked(clock::time_point from) override;
  void encoded(std::uint64_t ns) override { counters_.encode_ns += ns; }

  /// A caller's compute span, for the trace (thread-safe: the trace locks itself).
  void compute_span(const std::string& name, clock::time_point begin, clock::time_point end);
  bool tracing() const noexcept { return trace_ != nullptr; }
  trace_log* trace() noexcept { return trace_.get(); }
  /// The share of prefetched tensors the compute stream did not wait for (pager_metrics).
  static double timely_share(const pager_metrics& m) noexcept;

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
  // Acquires waiting for a load still in flight when they returned: the load's ticket, the call's
  // start and the bytes. The load's end (or failure) closes the wait.
  struct open_wait {
    clock::time_point from;
    std::size_t bytes;
  };
  std::unordered_map<std::uint64_t, open_wait> open_waits_;
  /// One fault wait of a tensor of `bytes`, from `from` (an acquire call) to `to` (its bytes
  /// usable).
  void fault_wait(clock::time_point from, clock::time_point to, std::size_t bytes);
  /// The load `ticket` ended at `at` (nullopt: it failed): closes the wait open on it.
  void close_wait(transfer_ticket ticket, std::optional<clock::time_point> at);
  std::vector<fault_wait_sample> fault_waits_;  // since the last reset, at most fault_wait_cap
  std::uint64_t fault_waits_dropped_ = 0;
  std::unique_ptr<trace_log> trace_;
  clock::time_point last_sample_ = start_;
  double hbm_occupancy_integral_ = 0;  // pct x seconds
  double hbm_peak_pct_ = 0;
};

}  // namespace htp::detail
