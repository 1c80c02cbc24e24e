// The capacity planner behind htp-plan: given a model, a dtype, a tensor-parallel split and the
// machine (HBM, host RAM, host link), how many layers stay resident in HBM, how much is paged per
// step, and what step time that predicts against a latency budget. A pure function of its inputs;
// the model and every formula are written out in docs/planner.md.
#pragma once

#include "planner/bench_json.hpp"
#include "shared/model_shapes.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace htp::bench {

/// Decode: one token per sequence per step. Prefill: prompt_tokens per sequence per step.
enum class phase { decode, prefill };

/// Who holds the host copies of the streamed layers on a node.
enum class host_copies {
  /// One copy per node: one process owns every GPU, or a process per GPU over the node's shared
  /// tier (htp::shared_tier) or files the ranks map (docs/multi_gpu.md).
  per_node,
  /// Every process of a process-per-GPU job (torchrun, vLLM, SGLang workers) pins a private copy
  /// of the streamed layers it loaded: the whole model's, as an offload per rank does.
  per_process,
};

/// Everything the plan depends on. Sizes in GB are 1e9 bytes; rates in GB/s are 1e9 bytes/s.
struct plan_inputs {
  model_shape model;
  dtype weights = dtype::bf16;
  int batch = 1;              // sequences per step
  int gpus = 1;               // tensor-parallel split: each GPU holds 1/gpus of each layer
  double hbm_gb = 80;         // HBM per GPU
  double hbm_gbps = 3350;     // HBM bandwidth per GPU
  double dense_tflops = 989;  // dense tensor-core rate per GPU
  double host_gb = 1024;      // pinned host RAM of the node (the whole TP group)
  host_copies copies = host_copies::per_node;
  double link_gbps = 55;                   // host->device rate per GPU (ignored when page_ms > 0)
  std::string link_source = "given";       // where link_gbps came from, for the report
  double page_ms = 0;                      // cost of moving one page; 0: page_bytes / link
  std::uint64_t page_bytes = 64ull << 20;  // a power of two >= 64 KiB (htp's slab size)
  double budget_ms = 200;                  // the step-time budget
  double headroom_fraction = 0.10;         // of HBM kept for activations, workspace, context
  int context = 0;                         // KV-cache tokens per sequence kept in HBM (0: none)
  phase mode = phase::decode;
  int prompt_tokens = 2048;     // prefill only
  bool allow_degraded = false;  // no room to stage a layer: read weights over the link
  measured_run measured;        // optional: h2d_gbps replaces link_gbps; step compared
};

/// The plan. Per-GPU figures are after the tensor-parallel split.
struct plan_result {
  // sizes
  std::uint64_t parameters = 0;           // total_parameters(model)
  std::uint64_t layer_bytes = 0;          // one decoder layer, whole model
  std::uint64_t layer_bytes_per_gpu = 0;  // ceil(layer_bytes / gpus)
  std::uint64_t pages_per_layer = 0;      // ceil(layer_bytes_per_gpu / page_bytes)
  std::uint64_t embedding_bytes_per_gpu = 0;
  std::uint64_t embedding_pages = 0;
  std::uint64_t total_bytes = 0;          // all weights, whole model
  std::uint64_t total_bytes_per_gpu = 0;  // layers * layer_bytes_per_gpu + embedding_bytes_per_gpu
  std::uint64_t kv_bytes_per_gpu = 0;
  std::uint64_t headroom_bytes_per_gpu = 0;  // headroom_fraction * HBM + KV cache
  std::uint64_t weight_pages = 0;            // HBM pages left for weights after the headroom
  std::uint64_t staging_pages = 0;  // pages streamed layers pass through (0 if all resident)
  // placement
  int resident_layers = 0;
  int streamed_layers = 0;
  bool overlap = true;                  // transfer overlaps compute (two staging layers)
  bool degraded = false;                // weights read over the link from mapped host memory
  std::uint64_t host_bytes_needed = 0;  // streamed layers: all GPUs' shards, per node or process
  // per step, per GPU
  std::uint64_t paged_pages_per_step = 0;
  std::uint64_t paged_bytes_per_step = 0;
  double link_gbps = 0;  // effective rate used
  std::string link_source;
  double page_ms = 0;  // effective cost of one page
  double transfer_ms = 0;
  double memory_ms = 0;   // bytes read / HBM bandwidth
  double flop_ms = 0;     // 2 * active params * tokens / gpus / FLOP rate
  double compute_ms = 0;  // max(memory_ms, flop_ms)
  double step_ms = 0;     // max(transfer, compute), or the sum without overlap
  bool meets_budget = false;
  // what would meet the budget
  int min_resident_layers = -1;  // fewest resident layers that meet it; -1: none
  int largest_batch = 0;         // largest batch <= batch_search_limit that meets it
  int batch_search_limit = 0;
  // against a measurement
  double measured_step_ms = 0;      // 0: none given
  double prediction_error_pct = 0;  // (step_ms - measured) / measured * 100
  std::vector<std::string> notes;   // assumptions worth reading
};

/// Throws htp::invalid_argument, naming the option and its range, for an input no model can take
/// (gpus outside [1, heads], a non-positive rate, budget or batch, ...). plan() and predict_htp()
/// both call it first.
void check_inputs(const plan_inputs& in);

/// Plans `in`. Throws htp::invalid_argument, naming the value and what would fit, when an input is
/// out of range, when HBM cannot hold the embeddings plus one staged layer and allow_degraded is
/// off, or when host RAM cannot hold the layers that must be streamed.
plan_result plan(const plan_inputs& in);

}  // namespace htp::bench
