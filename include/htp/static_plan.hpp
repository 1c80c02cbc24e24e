// htp::static_plan: fixed addresses for a step that a CUDA graph can replay.
//
// A captured graph replays the addresses it was captured with, so a pager that hands out a new
// HBM extent per acquire cannot serve it. A static plan fixes every address for its life instead:
//  - some tensors stay resident in HBM, each at its own offset of one arena;
//  - the rest stream through a ring of fixed bytes: the streamed tensors of one schedule position
//    (a *use*) are packed together at the ring's cursor, which wraps to the ring's start when the
//    next use does not fit, and restarts at 0 each step. So every use has one fixed offset, and
//    the k-slot scheme of vLLM's offloader is the ring of k equal uses;
//  - each use's load is issued when the last earlier use that shares bytes with it has finished
//    computing (its bytes are then free). When that use is in the previous step, the load is
//    *carried*: issued at the end of the previous step and joined before it ends.
// Each step so starts with its carried uses in the ring, and every replay does the same work:
// the step is periodic and its time is predicted exactly by an event model of three in-order
// lanes (compute, link, decode) that htp::predict_static_step runs.
//
// The planner (plan_static) chooses the resident set and the ring's size that minimise the
// predicted step: max(compute, streamed bytes / link) plus the stalls the pipeline cannot hide.
// Up to `exhaustive_limit` candidate resident sets it tries every one (so on small cases it is
// optimal among plans of this shape); above that, per-position knapsacks at each slot size and
// a local search of single-tensor moves. Coded tensors (wire_bytes != 0) cross the link coded
// and decode into the ring, the copy of one piece overlapping the decode of the one before
// (two wire buffers in the arena).
//
// This is planning only: htp::static_step (static_step.hpp) allocates the arena and runs a plan
// on a device. A pure function of its input; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace htp {

/// One tensor a static step reads.
struct static_tensor {
  std::string name;
  std::size_t bytes = 0;       ///< its bytes in HBM (decoded)
  std::size_t wire_bytes = 0;  ///< bytes on the link when stored coded; 0 = raw (`bytes`)
  /// Read at positions chosen at run time (a routed MoE expert): no static plan can serve it.
  bool routed = false;
  /// Resident in every plan, whatever the shape says (a tensor the caller needs at one address,
  /// e.g. a PyTorch Parameter read at two positions).
  bool keep = false;
  /// The bytes a load moves over the link.
  std::size_t link_bytes() const noexcept { return wire_bytes != 0 ? wire_bytes : bytes; }
  bool coded() const noexcept { return wire_bytes != 0; }
};

/// One position of the step's schedule: what its compute reads, and how long it computes.
struct static_position {
  std::vector<std::size_t> tensors;  ///< indices into static_plan_input::tensors
  double compute_ns = 0;             ///< measured (pager_metrics) or given
};

/// What a plan is made from.
struct static_plan_input {
  std::vector<static_tensor> tensors;
  std::vector<static_position> positions;  ///< in step order; the step repeats
  std::size_t hbm_budget = 0;              ///< bytes the arena may take
  double link_bytes_per_second = 0;        ///< H2D rate a step may use (the link budget)
  double decode_bytes_per_second = 0;      ///< decoded bytes per second; needed when coded
  double copy_overhead_ns = 0;             ///< fixed cost of each copy on the link
  /// The ring sizes the heuristic tries, as multiples of the largest use (the exhaustive search
  /// tries every multiple of 256 bytes from the largest use to all uses).
  std::vector<double> ring_factors = {1, 1.25, 1.5, 2, 2.5, 3, 4, 6, 8};
  /// Resident sets enumerated exhaustively while 2^tensors <= this; a heuristic above.
  std::size_t exhaustive_limit = std::size_t{1} << 14;
};

/// The choice a plan is made of: which tensors are resident, and the ring's size.
struct static_shape {
  std::vector<bool> resident;  ///< per tensor (static_tensor::keep overrides it)
  /// Bytes of the ring; at least the largest use (rounded up to 256). 0: as large as all uses
  /// together, so nothing reloads (they all stay in HBM).
  std::size_t ring_bytes = 0;
};

/// One streamed use: the streamed tensors of one position, at one offset of the ring.
struct static_use {
  std::size_t position = 0;
  std::size_t bytes = 0;             ///< packed, each tensor aligned to 256
  std::vector<std::size_t> tensors;  ///< streamed tensors the position reads, in its order
  std::vector<std::size_t> offsets;  ///< each one's offset in the arena (inside the ring)
  /// The position whose end frees this use's bytes (its load waits for it), or -1 when no other
  /// use shares its bytes (it is loaded once, and stays).
  std::ptrdiff_t freed_by = -1;
  bool carried = false;  ///< freed in the previous step: loaded at that step's end
};

/// Predicted times of one steady-state step, in ns.
struct static_prediction {
  double step_ns = 0;     ///< the event model's step
  double compute_ns = 0;  ///< sum of the positions' compute
  double link_ns = 0;     ///< streamed wire bytes / link rate (plus copy overheads)
  double decode_ns = 0;   ///< streamed coded bytes / decode rate
  /// max(compute, link, decode): what this plan's step could be with every stall hidden.
  double plan_bound_ns() const noexcept;
};

/// A plan: the arena's layout, the uses and the predicted step. Offsets are into one arena of
/// arena_bytes, every one aligned to 256 bytes.
struct static_plan {
  static_shape shape;
  std::vector<std::size_t> resident_offset;  ///< per tensor; npos when streamed
  std::size_t ring_offset = 0, ring_bytes = 0;
  std::size_t wire_offset = 0, wire_buffer_bytes = 0;  ///< two wire buffers; 0 = none
  std::size_t arena_bytes = 0;
  std::vector<static_use> uses;        ///< in step order
  std::vector<std::ptrdiff_t> use_at;  ///< per position: its use, or -1
  /// Per position: the uses whose loads are issued when it finishes, in issue order.
  std::vector<std::vector<std::size_t>> loads_after;
  std::size_t streamed_bytes = 0;  ///< wire bytes loaded per step
  static_prediction predicted;

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  /// The arena offset tensor `t` is read at in position `p` (fixed for the plan's life).
  /// @throws htp::invalid_argument if position p does not read t.
  std::size_t offset_of(std::size_t t, std::size_t p) const;
};

/// A lower bound on any scheme's step at this budget: max(compute, (bytes that cannot be
/// resident) / link), with every byte streamed raw or coded as the input says.
double static_step_bound_ns(const static_plan_input& in);

/// Lays out `shape` for `in` and predicts its step. Tensors no position reads are left out.
/// @throws htp::invalid_argument for an input that is not plannable (see plan_static);
/// htp::out_of_memory if the layout exceeds hbm_budget (the message gives both).
static_plan make_static_plan(const static_plan_input& in, const static_shape& shape);

/// Predicts the steady-state step of `plan` (the event model in the file comment).
static_prediction predict_static_step(const static_plan_input& in, const static_plan& plan);

/// The plan with the least predicted step among plans of this shape within the budget.
/// @throws htp::invalid_argument naming the tensor for a routed tensor (plan the dense segments
/// between routers separately, docs/pager.md), for a tensor index out of range, a zero-byte
/// tensor, a non-positive link rate, a coded tensor without a decode rate, negative compute;
/// htp::out_of_memory when no plan fits (the message gives the least arena any plan needs).
static_plan plan_static(const static_plan_input& in);

/// The round-robin scheme engines run today (vLLM's prefetch offloader): the layers shaped as the
/// most common layer (the decoder layers) stream whole through `k` slots of a layer's bytes (a
/// ring of k layers); every other position stays resident, and the first layers too, in schedule
/// order, while they fit. `layer_of[p]` names position p's layer (positions of one layer are
/// consecutive; static_plan::npos for a position of no layer); empty: each position is a layer.
/// A baseline for benchmarks. @throws as make_static_plan; htp::out_of_memory when even all
/// layers streamed do not fit.
static_plan round_robin_plan(const static_plan_input& in, std::size_t k,
                             const std::vector<std::size_t>& layer_of = {});

}  // namespace htp
