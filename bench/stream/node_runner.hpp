// The stream bench on a node of N GPUs (htp-stream-bench --gpus N): the same model shape and
// per-GPU HBM budget as the single-GPU policies, in three parallel modes over one host tier.
//  - data-parallel: every GPU runs the whole model from replicated weights (one host copy);
//  - tensor-parallel: every weight split into N column shards, shard g paged by GPU g, and an
//    all-reduce of the layer's activations (tokens x hidden, bf16) after each layer;
//  - swap-and-shard: each GPU holds 1/N of every layer, layers gathered two at a time, two groups
//    ahead (one synchronisation per two layers), or one at a time when HBM is too short for that.
// On sim: N sim devices, each with the modelled link and compute of the single-GPU run. On cuda:
// the first N GPUs with cuBLAS GEMMs, NCCL collectives (one-rank copies for N = 1 without NCCL).
#pragma once

#include "runner.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace htp::bench {

enum class node_mode { data_parallel, tensor_parallel, swap_and_shard };
const char* to_string(node_mode m) noexcept;

struct node_options {
  std::size_t gpus = 2;
  backend kind = backend::sim;  ///< sim or cuda
  double sim_link_gbps = 4.0;   ///< each GPU's modelled PCIe link
  double sim_latency_us = 5.0;
  double compute_gbps = 349.0;   ///< modelled weight-reading rate of each GPU
  double interconnect_gbps = 0;  ///< modelled NVLink per GPU for collectives; 0 = 450 x link / 55
  double shared_link_gbps = 0;   ///< one H2D link all GPUs share upstream; 0 = none
  /// sim: timing-only devices (no bytes stored or moved, checksums off): full-size models on a
  /// small machine. The weights carry no patterns then and nothing is verified.
  bool timing_only = false;
  /// tensor-parallel: keep each GPU's shards of most layers device-resident (no host copy)
  /// as far as HBM allows next to a paging window of three layers; page the rest.
  bool resident = false;
  /// The host tier's size; 0 = what the mode needs. A mode needing more is skipped, saying so.
  std::size_t host_budget_bytes = 0;
  /// sim time dilation: the rates above are already divided by it (and the latency multiplied),
  /// so the run takes `time_scale` times its modelled time and the simulation's own per-operation
  /// cost shrinks against it; every time in the result is divided by it again (rates multiplied).
  double time_scale = 1.0;
  /// HBM forced short (tensor-parallel): after the warm-up, each GPU takes a device-resident block
  /// that leaves only this many bytes of its budget to the paged tensors, and its pager serves
  /// what no longer fits from mapped host memory (oom_policy::allow_degraded; the sim compute reads
  /// those weights at the link's rate). 0: off.
  std::size_t squeeze_leave_bytes = 0;
  /// For tests: GPU `fail_gpu`'s thread throws htp::logic_error ("injected failure ...") at step
  /// `fail_at_step` (warm-up steps count), between its first and second layer, so the run's failure
  /// path (collectives aborted, every GPU thread returns, the error rethrown) can be exercised.
  /// -1 (both): from $HTP_STREAM_BENCH_FAIL as "GPU:STEP" (e.g. "1:1"), else off.
  int fail_gpu = -1;
  int fail_at_step = -1;
};

struct node_result {
  std::string mode;
  std::size_t gpus = 0;
  bool skipped = false;
  std::string skip_reason;
  std::vector<double> step_ms;  ///< per timed step: the slowest GPU
  summary_ms step;
  bool meets_budget = false;
  double bytes_per_step_per_gpu =
      0;                       ///< paged in by the GPUs' pagers, mean over GPUs (swap-and-shard's
                               ///< host-path loads go through the engine, not counted here)
  double host_gbps = 0;        ///< all GPUs' host-to-device bytes / timed wall time
  double shared_link_use = 0;  ///< of the shared link's cap (0 when none)
  /// Tensor-parallel: the all-reduce per layer. Swap-and-shard: the barrier cost per layer, i.e.
  /// the compute stream's wait for gathered layers (at the group's first layer), per layer.
  /// Device-side.
  double collective_ms_per_layer = 0;
  std::size_t layers_per_sync = 0;     ///< swap-and-shard: layers per synchronisation with compute
  double barriers_per_layer = 0;       ///< swap-and-shard: compute-stream waits per layer acquired
  std::string layer_source;            ///< swap-and-shard: "peers" or "host" (the plan's choice)
  double interconnect_gbps = 0;        ///< swap-and-shard: the rate the plan used (0: not needed)
  bool interconnect_measured = false;  ///< by the probe all-gather (cuda), not the sim's model
  double stall_ms_per_step = 0;        ///< compute stream waiting on htp, mean over GPUs
  std::size_t host_tier_bytes = 0;     ///< host memory the node's tensors use
  std::size_t host_budget_bytes = 0;   ///< the host tier's size
  int resident_layers = 0;  ///< tensor-parallel --resident: layers kept in HBM on every GPU
  double fault_ms_per_64mib_page = 0;  ///< acquire-to-usable wait of faults and late prefetches,
                                       ///< per 64 MiB, mean over GPUs
  double faults_per_ms = 0;            ///< faults and late prefetches per timed ms, per GPU
  double hbm_peak_pct = 0;             ///< the fullest GPU's HBM peak
  double link_use_pct = 0;             ///< per-GPU page-in rate over the link peak
  bool timing_only = false;            ///< sim timing-only: nothing verified
  double time_scale = 1.0;             ///< sim time dilation the run was made with (results undone)
  std::size_t squeeze_leave_bytes = 0;  ///< HBM forced short: bytes left to paged tensors, the
                                        ///< most any GPU had (0: not squeezed)
  std::size_t squeeze_block_bytes =
      0;                         ///< the device-resident block that took the rest (least GPU)
  double degraded_per_step = 0;  ///< acquires served from mapped host memory, per step per GPU
  std::uint64_t mismatches = 0;  ///< weight bytes read that differ from what was registered
};

/// Runs one mode: a fresh node of N devices (sim, or the first N cuda GPUs), cfg's model and
/// per-GPU HBM budget, warm-up steps, then timed steps, one thread per GPU. When a GPU's thread
/// fails, the run does not wait for it: the collectives are aborted (the other GPUs' pending
/// collectives complete, their next calls throw), each GPU stops its swap-and-shard gathers and
/// drains its stream before its memory is freed, and once every thread has returned the first
/// GPU's error is rethrown (each GPU's error is also printed to stderr as it happens).
/// @throws htp::invalid_argument for gpus < 1, more cuda GPUs than are visible or a malformed
/// $HTP_STREAM_BENCH_FAIL; the first failing GPU thread's error.
node_result run_node_mode(const bench_config& cfg, node_mode mode, const node_options& o);

}  // namespace htp::bench
