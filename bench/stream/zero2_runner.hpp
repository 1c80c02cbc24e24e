// htp-stream-bench --train --zero2: the design's hybrid on a node of N timing-only sim GPUs.
// ZeRO-2 with the double-buffered swapper:
// - every layer's weights are sharded over the GPUs (swap_shard) and gathered ahead in the step's
//   visit order, forward then backward in reverse (forward_backward_order), so the backward's
//   gathers run ahead as the forward's do;
// - each layer's gradient is reduce-scattered on the GPU's reduction stream as soon as its backward
//   ends (htp::gradient_reducer), and each GPU keeps its shard of it;
// - after the step's reductions are joined, the optimizer step (AdamW) runs on each GPU's shard,
//   modelled as the HBM traffic it makes (28 bytes per parameter: fp32 master weights, two fp32
//   moments, the bf16 gradient read and the bf16 weight written).
// Two variants run side by side on the same node: "htp" (swap_shard's defaults, two staging
// buffers of two layers: one compute-stream wait per two layers) and "per-layer" (one buffer of one
// layer: each layer gathered only once the one before is done with the buffer, a barrier per layer,
// as a synchronous gather per layer does). HBM per GPU holds, out of the budget: the activations
// (as --train reserves them), the gradient shards, the optimizer state and a layer's gradient; the
// pager gets the rest for the weight shards and the staging buffers. A layer's gradient is
// written into one of two buffers used in turn (gradient_slots.hpp).
#pragma once

#include "runner.hpp"
#include "train_runner.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace htp::bench {

struct zero2_options {
  train_options train;                ///< batch, sequence, FLOP rate, GPUs, links, time scale
  std::size_t host_budget_bytes = 0;  ///< the node's host tier; 0: what the shards need
  double hbm_gbps = 3350;             ///< modelled HBM rate of the optimizer step (dilated)
};

/// One way of feeding the weights: swap_shard's buffers and layers per synchronisation.
struct zero2_variant {
  std::string name;
  std::size_t ahead = 2, layers_per_sync = 2;
};

/// The two variants the bench compares: htp's double buffering and the per-layer barrier.
std::vector<zero2_variant> zero2_variants();

struct zero2_result {
  std::string variant;
  bool skipped = false;
  std::string skip_reason;
  std::size_t gpus = 0, layers = 0;
  std::size_t hbm_budget_bytes = 0;
  std::size_t reserved_bytes = 0;  ///< activations, gradient shards, optimizer state, 2 gradients
  std::size_t paged_budget_bytes = 0;
  std::string layer_source;  ///< "peers" or "host": where swap_shard gathers the layers from
  std::size_t ahead = 0, layers_per_sync = 0;
  std::vector<double> step_ms;  ///< per timed step: the slowest GPU's
  summary_ms step;
  double compute_ms = 0;    ///< forward + backward, modelled
  double optimizer_ms = 0;  ///< the AdamW step on the shard, modelled
  double gather_ms = 0;     ///< the all-gathers' modelled interconnect time per step
  double bound_ms = 0;      ///< max(compute, gathers, host paging) + optimizer
  double step_over_bound = 0;
  double waits_per_step = 0;          ///< compute-stream waits for gathers (one per group)
  double sync_ms_per_step = 0;        ///< the compute stream's time at those waits
  double sync_ms_per_two_layers = 0;  ///< of it, per two layer visits
  double page_in_bytes_per_step = 0;  ///< the GPU's own shards paged in from host
  double reduction_ms = 0, reduction_hidden_ms = 0, reduction_exposed_ms = 0, exposed_share = 0;
  double hbm_peak_pct = 0;
};

/// Runs `v` on `o.train.gpus` fresh timing-only sim GPUs and a node over them (cfg.layers,
/// cfg.hbm_budget_bytes per GPU, cfg.link_peak_bytes_per_second as each host link), warm-up and
/// timed steps. Times in the result are undilated. A budget that cannot hold the reservations and
/// the staging buffers comes back skipped. @throws what the node, swap_shard or a GPU's thread
/// throws (the first GPU's failure).
zero2_result run_zero2(const bench_config& cfg, const zero2_options& o, const zero2_variant& v);

/// One result as JSON (the "zero2" section's rows).
nlohmann::json to_json(const zero2_result& r);

/// The results side by side on stdout, with the design's 3.4 ms-per-layer barrier beside the
/// measured synchronisation cost. Never throws (printf).
void print_zero2_table(const std::vector<zero2_result>& results);

}  // namespace htp::bench
