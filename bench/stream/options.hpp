// htp-stream-bench's command line: its options, their defaults and the parser.
#pragma once

#include "common/bench_device.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace htp::bench {

/// Every option of htp-stream-bench, with its default. The device ones (--backend, --sim-link-gbps,
/// --sim-latency-us, --timing-only) are in `device`; the set-up dilates its rates
/// (--sim-time-scale).
struct stream_options {
  device_options device = [] {
    device_options d;
    d.sim_link_gbps = 4;
    d.sim_latency_us = 5;
    return d;
  }();
  std::string model_name = "llama-3.1-8b", config_path, dtype_name = "bf16";
  int layers = 0, tokens = 1, steps = 4, warmup = 1, kv_context = 0, kv_block = 256;
  std::string budget = "0.5", sweep, policies = "all", json_path, trace_path,
              trace_policy = "schedule-k2";
  double slab_mib = 64, page_kib = 64, chunk_mib = 2, rate_gbps = 0, budget_ms = 200;
  double sim_compute_gbps = 0;
  std::string sim_compute = "modelled";
  std::uint64_t seed = 1;
  int fail_gpu = -1, fail_at_step = -1;
  std::size_t gpus = 0;
  std::string node_modes = "data-parallel,tensor-parallel,swap-and-shard";
  double interconnect_gbps = 0, shared_link_gbps = 0;
  bool node_only = false, resident = false, case_study = false;
  double time_scale = 1, squeeze_mib = 0, tail_budget_ms = 2000;
  std::string host_budget;
  /// "module" (one acquire per parameter), "layer" (one acquire(list) per layer) or "both".
  std::string granularity = "module";
  /// Several models in one run: "name[:layers],..." (empty: --model alone).
  std::string models;
  /// Run each single-GPU policy twice, uncompressed and with its weights compressed
  /// (pager::register_tensor with a weight_format), on Llama-like synthetic weights.
  bool compress = false;
  /// Also run the static schemes (static_runner.hpp) at each budget, beside the policies.
  bool static_plans = false;
  /// Timing-only devices encode nothing: the wire size is modelled at this ratio
  /// (pager_config::modelled_compression_ratio; 0.68, docs/codec.md).
  double compress_ratio = 0.68;
  /// --case-study: tensor-parallel pages every layer from the host tier (no resident layers).
  bool host_paging = false;
  /// --train: the training step (train_runner.hpp) at each budget instead of the policies.
  bool train = false;
  int batch = 1, seq_len = 2048;
  /// --train: the modelled device FLOP rate (an H100 SXM's dense bf16 peak).
  double train_tflops = 989;
  /// --train --zero2: ZeRO-2 with swap-and-shard on --gpus (zero2_runner.hpp) instead of the
  /// data-parallel pagers.
  bool zero2 = false;
  /// --train --page-activations: each layer's activation paged with the weights
  /// (tensor_kind::activation) instead of reserved out of the budget.
  bool page_activations = false;
};

/// One model of a --models run: its preset and the layers to run (0: the default for the backend).
struct model_run {
  std::string name;
  int layers = 0;
};

/// The models to run: --models parsed ("llama-3.1-8b:8,llama-3.1-70b:4"), or --model and --layers
/// alone. @throws htp::invalid_argument for a malformed entry.
std::vector<model_run> models_of(const stream_options& o);

/// The granularities to run, in order: {false} (module), {true} (layer) or both.
/// @throws htp::invalid_argument for another value of --granularity.
std::vector<bool> granularities_of(const stream_options& o);

/// Parses argv into `o`, then applies --case-study's preset to the options not given explicitly.
/// Returns -1 to go on, or the exit code to return now (0 after --help, non-zero for a bad
/// command line, which it has reported).
int parse_stream_options(int argc, char** argv, stream_options& o);

}  // namespace htp::bench
