// htp::static_step: a static plan (static_plan.hpp) running on a device, as stream work only.
//
// It owns one HBM arena (plan.arena_bytes, allocated once) where every tensor has the fixed
// address the plan gave it, and two streams of its own: `prefetch` (the H2D copies) and `decode`
// (the decode kernels of coded tensors). A step is, per position p of the schedule:
//   begin(p, compute)   on p == 0, forks prefetch and decode from `compute` (an event each);
//                       then makes `compute` wait until p's streamed tensors are in;
//   <the caller's kernels for p on `compute`, reading address(t, p)>
//   end(p, compute)     records that p has finished where a load waits for it and issues those
//                       loads; on the last position, joins prefetch and decode back into compute.
// Every call enqueues asynchronous copies, decode kernels and event records and waits: no host
// callback, no host wait, no allocation. So a step can be captured into a graph (capture(), or
// the caller's own capture, e.g. torch.cuda.graph, around begin/end) and replayed with no host
// work, or run eagerly with the same calls. Coded tensors are copied into one of two wire buffers
// and decoded from there, the copy of piece n + 1 overlapping the decode of piece n.
//
// Between steps the arena holds the resident tensors and the uses the next step starts with
// (prime() puts them there before the first step). Replays of a captured step must be ordered
// one after another (launch them on one stream), as a graph's replays on one stream are.
//
// Link budget: a replay cannot be paced by the host, so the plan is made at the rate the step
// may use (static_plan_input::link_bytes_per_second); launch() additionally takes the step's
// streamed bytes from a token bucket before each replay, which keeps the long-run rate within
// the budget when htp launches the replays (docs/pager.md, "Static plans").
//
// Thread safety: one thread drives a step at a time (begin/end/run/capture/launch are not
// thread-safe against each other); address() and plan() are safe from any thread.
#pragma once

#include <htp/device.hpp>
#include <htp/static_plan.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace htp {

class token_bucket;

class static_step {
 public:
  /// Allocates the arena and creates the streams and events. `sources[t]` is tensor t's stored
  /// bytes: `bytes` raw, or a coded frame of `wire_bytes` (codec.hpp), in pinned host memory of
  /// `dev` or memory registered with it (device::register_host_memory), which must stay valid
  /// and unchanged for the step's life. Tensors no position reads may have a null source.
  /// @throws htp::invalid_argument for a plan not made from `in` or a missing source;
  /// htp::out_of_memory if the arena cannot be allocated.
  static_step(device& dev, const static_plan_input& in, static_plan plan,
              std::vector<const void*> sources);
  /// Synchronizes its streams and frees the arena. Never throws.
  ~static_step();
  static_step(const static_step&) = delete;
  static_step& operator=(const static_step&) = delete;

  /// Loads the resident tensors and the uses a step starts with, verifying every decode, and
  /// blocks until they are in. Call once before the first step (not inside a capture).
  /// @throws htp::corrupt_data naming the tensor if a coded frame fails its checks.
  void prime();

  /// The device address of tensor `t` as position `p` reads it; fixed for the step's life.
  /// @throws htp::invalid_argument if position p does not read t.
  void* address(std::size_t t, std::size_t p) const;

  /// Enqueues position p's entry on `compute` (see the file comment). Positions must be entered
  /// in order, each begin followed by its end, starting at 0 each step. begin(0) on a step left
  /// part way (a forward that raised) waits for its work and loads what a step starts with again
  /// (logged), outside a capture; inside one it is refused before anything is queued.
  /// @throws htp::logic_error for a position out of order; as device calls otherwise.
  void begin(std::size_t p, stream_ref compute);
  /// Enqueues position p's exit on `compute` and issues the loads it frees.
  void end(std::size_t p, stream_ref compute);

  /// A whole step: for each position, begin, `kernels(p, compute)`, end.
  void run(stream_ref compute, const std::function<void(std::size_t, stream_ref)>& kernels);
  /// Captures run(compute, kernels) into a graph (device::begin_capture on `compute`).
  /// @throws as device::end_capture (htp::logic_error for work left unjoined).
  graph capture(stream_ref compute, const std::function<void(std::size_t, stream_ref)>& kernels);
  /// Replays `g` on `compute`; with a bucket, first takes the step's streamed bytes from it,
  /// sleeping until they are there (the host paces replays, never the graph).
  void launch(const graph& g, stream_ref compute, token_bucket* budget = nullptr);

  /// Coded tensors whose decode failed its checks in the last step that ran (each decode stores
  /// its verdict, so a step that decodes a piece right clears that piece's earlier failure);
  /// clears them. Read after the work has completed (synchronize the compute stream first).
  std::vector<std::string> take_decode_failures();

  const static_plan& plan() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace htp
