// Gradient reduction on the reduction stream, for data-parallel and ZeRO-2 training: each layer's
// gradient is all-reduced (data parallel) or reduce-scattered (ZeRO-2: each rank keeps its shard's
// sum) as soon as its backward ends, overlapping the backward of the layers before it. See
// docs/training.md.
//
// Note [Gradient reduction]
// - One object per GPU (per rank), over that GPU's device, the node's collectives and a reduction
//   stream (the pager's, transfer_engine::reduction_stream(), or the caller's own).
// - all_reduce() / reduce_scatter(): the reduction stream waits for the work queued on `compute`
//   so far (one event, re-recorded per call: a wait captures the event as it is when enqueued),
//   then runs the collective. The host never blocks. The gradient buffer must not be written on
//   `compute` until the reduction is done: join() first (or the caller's own event).
// - join(compute) ends a step: `compute` waits for every reduction queued (the optimizer step reads
//   their results). Nothing blocks the host.
// - Timing, from events the device times (cuda: cudaEventElapsedTime; sim: the modelled device
//   time): each reduction's time on the reduction stream (from when the stream reaches it, its wait
//   for compute passed, to its end), and each step's exposed time: from the compute stream's last
//   work before join() to the end of the step's last reduction (0 when the reductions ended
//   first). Hidden = reduction time - exposed: the reductions that ran under compute. A step's
//   figures count once its events have completed; metrics() collects them without blocking.
#pragma once

#include <htp/collectives.hpp>
#include <htp/device.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace htp {

/// What the reductions cost and how much of it compute hid, over the steps measured so far.
struct gradient_reduction_metrics {
  std::uint64_t all_reduces = 0;      ///< all_reduce() calls
  std::uint64_t reduce_scatters = 0;  ///< reduce_scatter() calls
  std::uint64_t bytes = 0;            ///< gradient bytes handed to the collectives (send side)
  std::uint64_t steps = 0;            ///< joined steps whose timing is in the figures below
  double reduction_ms = 0;            ///< the measured steps' reductions, on the reduction stream
  double exposed_ms = 0;              ///< the measured steps' wait past compute for reductions
  double hidden_ms = 0;               ///< reduction_ms - exposed_ms (never below 0)
  /// exposed_ms / reduction_ms (0 with no reduction time). Never throws.
  double exposed_share() const noexcept { return reduction_ms > 0 ? exposed_ms / reduction_ms : 0; }
};

class gradient_reducer {
 public:
  /// Reduces rank `rank`'s gradients over `coll` on `reduction` (a stream of `dev`, which must
  /// outlive this object, as must `coll`). @throws htp::invalid_argument for a rank outside the
  /// collectives, or a null reduction stream.
  gradient_reducer(device& dev, collectives& coll, std::size_t rank, stream_ref reduction);
  /// Waits (host-blocking) for the reduction stream's work queued by this object, then destroys
  /// its events. Never throws.
  ~gradient_reducer();
  gradient_reducer(const gradient_reducer&) = delete;
  gradient_reducer& operator=(const gradient_reducer&) = delete;

  /// Sums `count` elements at `grad` over every rank, in place, once `compute`'s work queued so far
  /// is done. Stream order: after compute's work so far, on the reduction stream; `grad` holds the
  /// sum once join()'s wait passes. Thread safety: calls of one object from one thread at a time.
  /// @throws htp::invalid_argument for a null buffer or a count of 0; what the collectives throw
  /// (htp::logic_error once aborted).
  void all_reduce(void* grad, std::size_t count, element_type type, stream_ref compute);
  /// Sums the ranks' `coll.size() * count` elements at `grad`; this rank's block of the sum
  /// (elements [rank * count, (rank + 1) * count)) lands at `shard`, `count` elements (`shard`
  /// may be that block of `grad`). Otherwise as all_reduce.
  void reduce_scatter(const void* grad, void* shard, std::size_t count, element_type type,
                      stream_ref compute);
  /// Ends a step: work queued on `compute` afterwards runs once every reduction queued so far is
  /// done. Does not block the host. Thread safety: as all_reduce.
  void join(stream_ref compute);
  /// The figures of the steps whose events have completed (collected now, without blocking).
  /// Thread safety: as all_reduce. Never throws on a healthy device (htp::cuda_error, or
  /// htp::logic_error on sim, if the captured work failed).
  gradient_reduction_metrics metrics();
  /// Starts the figures afresh (e.g. after warm-up steps); steps not yet completed are dropped
  /// from them. Thread safety: as all_reduce.
  void reset_metrics();

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace htp
