// htp-stream-bench's command line. See options.hpp.
#include "options.hpp"

#include <htp/error.hpp>

#include <CLI/CLI.hpp>

#include <sstream>
#include <stdexcept>

namespace htp::bench {
namespace {

/// Adds the options of the model, the steps, the budgets and the output to `app`.
void add_run_options(CLI::App& app, stream_options& o) {
  app.add_option("--model", o.model_name,
                 "preset: llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, mixtral-8x7b, gpt3-175b");
  app.add_option("--config", o.config_path, "a Hugging Face config.json instead of a preset");
  app.add_option("--dtype", o.dtype_name, "bf16, fp16, fp8 or int8");
  app.add_option("--layers", o.layers,
                 "layers to run, with the real layer shape (default: all on a GPU, 8 on sim)");
  app.add_option("--tokens", o.tokens, "tokens per step: the decode batch, or the prefill length");
  app.add_option("--steps", o.steps, "timed steps per policy");
  app.add_option("--warmup", o.warmup, "warm-up steps per policy (not timed)");
  app.add_option("--hbm-budget", o.budget,
                 "HBM budget: a fraction of the streamed weights (0.5) or bytes (8GiB)");
  app.add_option("--sweep", o.sweep, "comma-separated budgets to sweep (e.g. 0.25,0.5,0.75)");
  app.add_option("--policies", o.policies, "all, or a comma-separated subset of the policy names");
  add_backend_option(app, o.device.backend);
  app.add_option("--slab-mib", o.slab_mib, "slab (reservation unit) size in MiB, a power of two");
  app.add_option("--page-kib", o.page_kib,
                 "page (allocation unit) size in KiB, a power of two up to a slab");
  app.add_option("--chunk-mib", o.chunk_mib, "transfer chunk size in MiB");
  app.add_option("--rate-gbps", o.rate_gbps, "cap H2D/D2H at this rate (0 = uncapped)");
  app.add_option("--kv-context", o.kv_context,
                 "initial KV-cache context in tokens (0 = no KV cache)");
  app.add_option("--kv-block", o.kv_block, "tokens per KV block tensor");
  app.add_option("--budget-ms", o.budget_ms, "end-to-end latency budget per step");
  app.add_option("--json", o.json_path, "write all results and the configuration as JSON");
  app.add_option("--trace", o.trace_path, "write a Chrome/Perfetto trace of one policy");
  app.add_option("--trace-policy", o.trace_policy, "the policy to trace");
  add_sim_link_options(app, o.device, "sim: modelled host link, GB/s each way",
                       "sim: modelled per-copy latency");
  app.add_option("--sim-compute", o.sim_compute,
                 "sim: 'modelled' (device time from HBM bandwidth) or 'checksum' (read every byte "
                 "on the CPU)");
  app.add_option("--sim-compute-gbps", o.sim_compute_gbps,
                 "sim: HBM rate of the modelled compute (default: 87x the link, an H200's 4.8 TB/s "
                 "over 55 GB/s)");
  app.add_option("--seed", o.seed, "payload and routing seed");
  app.add_option("--granularity", o.granularity,
                 "how weights are acquired: module (one acquire per parameter, as "
                 "htp.torch.offload does), layer (a layer's weights as one acquire(list)), or both "
                 "(each budget runs both)")
      ->check(CLI::IsMember({"module", "layer", "both"}));
  app.add_option("--models", o.models,
                 "several models in one run, each with its layers: e.g. "
                 "llama-3.1-8b:8,llama-3.1-70b:4; a name ending in .json is a config.json "
                 "(replaces --model, --config and --layers; the JSON then holds one run per model "
                 "under 'runs')");
}

/// Adds the options of the node run (--gpus and what goes with it) and of the sim's scale to `app`.
void add_node_options(CLI::App& app, stream_options& o) {
  app.add_option("--fail-gpu", o.fail_gpu,
                 "for tests: this GPU's thread of a --gpus run throws at --fail-at-step "
                 "(the run must end with its error, every other rank released; also "
                 "HTP_STREAM_BENCH_FAIL=GPU:STEP)");
  app.add_option("--fail-at-step", o.fail_at_step,
                 "for tests: the step (warm-up included) at which --fail-gpu throws");
  app.add_option("--gpus", o.gpus,
                 "also run on a node of N GPUs (sim: N sim devices; cuda: the first N GPUs) in "
                 "--node-modes, after the single-GPU policies, at the same per-GPU HBM budgets");
  app.add_option("--node-modes", o.node_modes,
                 "comma-separated: data-parallel, tensor-parallel, swap-and-shard");
  app.add_option(
      "--interconnect-gbps", o.interconnect_gbps,
      "sim --gpus: modelled NVLink per GPU for collectives (default: 450/55 x the link)");
  app.add_option("--shared-link-gbps", o.shared_link_gbps,
                 "sim --gpus: one H2D link all GPUs share upstream (0 = none)");
  app.add_flag("--timing-only", o.device.sim_timing_only,
               "sim: timing-only devices (no bytes stored or moved, checksums off): full-size "
               "models on a small machine");
  app.add_flag("--node-only", o.node_only,
               "with --gpus: run only the node modes, not the single-GPU policies");
  app.add_flag("--resident", o.resident,
               "--gpus tensor-parallel: keep most layers' shards device-resident where HBM allows, "
               "page the rest (spread among them)");
  app.add_option("--host-budget", o.host_budget,
                 "--gpus: the node's host tier (bytes, e.g. 256GB; default: what the mode needs)");
  app.add_option(
      "--sim-time-scale", o.time_scale,
      "sim: run S times slower than modelled (rates / S, latency x S) and report times / S, so "
      "the simulation's own per-operation cost shrinks S-fold against the modelled times");
  app.add_option("--hbm-squeeze-mib", o.squeeze_mib,
                 "--gpus tensor-parallel: run it again with HBM forced short: after the warm-up a "
                 "resident block leaves only "
                 "this many MiB to paged tensors, and what does not fit is served from host memory "
                 "(degraded)");
  app.add_option("--tail-budget-ms", o.tail_budget_ms,
                 "the tail budget the HBM-short run's p99.9 is held against");
  app.add_flag("--static", o.static_plans,
               "also run the step as static plans captured once and replayed (htp's plan, raw and "
               "compressed, and the round-robin k = 1, 2, 4 slots engines use), side by side");
  app.add_flag("--compress", o.compress,
               "run each single-GPU policy twice side by side, uncompressed and with compressed "
               "weights (bf16/fp16 only), on Llama-like synthetic weights (docs/codec.md)");
  app.add_option("--compress-ratio", o.compress_ratio,
                 "timing-only: the modelled wire / logical ratio of compressed weights")
      ->capture_default_str();
  app.add_flag("--host-paging", o.host_paging,
               "with --case-study: tensor-parallel keeps no layer resident and pages every layer "
               "from the host tier (348 GB of host copies; with --compress 0.68 of that)");
  app.add_flag(
      "--train", o.train,
      "the training step instead of the policies: forward then backward over every "
      "layer, each weight acquired twice, as the pager's cyclic schedule; timing-only sim; "
      "with --gpus N each layer's gradient all-reduced data parallel (default budgets "
      "0.3,0.5,0.75)");
  app.add_option("--batch", o.batch, "--train: sequences per step")->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "--train: tokens per sequence")->capture_default_str();
  app.add_option("--train-tflops", o.train_tflops,
                 "--train: modelled device FLOP rate in TFLOPS (forward 2 x params x tokens, "
                 "backward twice that)")
      ->capture_default_str();
  app.add_flag("--page-activations", o.page_activations,
               "--train: page each layer's activation with the weights (tensor_kind::activation: "
               "written fresh in its forward pass, dead after its backward) instead of reserving "
               "them out of the budget");
  app.add_flag("--zero2", o.zero2,
               "--train: ZeRO-2 with the double-buffered swapper instead: weights sharded over "
               "--gpus and gathered ahead in both directions, gradients reduce-scattered, the "
               "optimizer step on each GPU's shard; htp's two-layer groups against a barrier per "
               "layer (optimizer state, gradient shards and activations reserved in HBM)");
  app.add_flag("--case-study", o.case_study,
               "the design's worked example: opt-175b in fp16 on 8 GPUs of 40 GB, 256 GB of host "
               "RAM, tensor-parallel "
               "(resident where possible) and swap-and-shard, timing-only sim "
               "(docs/case_study.md); other flags still apply");
}

/// --case-study: the design's worked example, over the options `app` did not see given.
void apply_case_study(const CLI::App& app, stream_options& o) {
  // Flags given explicitly still win over the preset's values.
  const auto unset = [&](const char* name) { return app.count(name) == 0; };
  o.model_name = "opt-175b";
  o.dtype_name = "fp16";
  if (unset("--gpus")) o.gpus = 8;
  if (unset("--hbm-budget")) o.budget = "40GB";
  if (unset("--host-budget")) o.host_budget = "256GB";
  if (unset("--node-modes")) o.node_modes = "tensor-parallel,swap-and-shard";
  if (unset("--backend")) o.device.backend = "sim";
  if (unset("--sim-link-gbps"))
    o.device.sim_link_gbps = 55;  // PCIe Gen5 x16, as measured on H100/H200 hosts
  if (unset("--sim-compute-gbps")) o.sim_compute_gbps = 3350;  // an H100 SXM's HBM3
  if (unset("--steps")) o.steps = 8;
  if (unset("--warmup")) o.warmup = 2;
  // The design's 64 MiB pages as transfer chunks: a fault waits behind at most one (1.5 ms at
  // 44 GB/s), and 8 GPUs' modelled copies on a 2-core machine wake their threads 32x less often.
  if (unset("--chunk-mib")) o.chunk_mib = 64;
  if (unset("--sim-time-scale")) o.time_scale = 10;  // docs/case_study.md: the simulation's cost
  // The out-of-memory fallback: 128 MiB left to paging, less than the largest shard (fc1, 151 MB).
  if (unset("--hbm-squeeze-mib")) o.squeeze_mib = o.host_paging ? 0 : 128;
  o.layers = 0;
  o.device.sim_timing_only = o.node_only = true;
  o.resident = !o.host_paging;
}

}  // namespace

std::vector<model_run> models_of(const stream_options& o) {
  if (o.models.empty()) return {{o.model_name, o.layers}};
  std::vector<model_run> runs;
  std::stringstream ss(o.models);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto colon = item.find(':');
    model_run m{item.substr(0, colon), 0};
    if (colon != std::string::npos) {
      try {
        std::size_t used = 0;
        m.layers = std::stoi(item.substr(colon + 1), &used);
        if (used + colon + 1 != item.size() || m.layers < 1) throw std::invalid_argument(item);
      } catch (const std::exception&) {
        throw invalid_argument("--models " + o.models + ": '" + item +
                               "' is not name or name:layers with layers >= 1");
      }
    }
    if (m.name.empty()) throw invalid_argument("--models " + o.models + ": an empty model name");
    runs.push_back(m);
  }
  if (runs.empty()) throw invalid_argument("--models is empty");
  return runs;
}

std::vector<bool> granularities_of(const stream_options& o) {
  if (o.granularity == "module") return {false};
  if (o.granularity == "layer") return {true};
  if (o.granularity == "both") return {false, true};
  throw invalid_argument("--granularity " + o.granularity + ": module, layer or both");
}

int parse_stream_options(int argc, char** argv, stream_options& o) {
  CLI::App app{"htp-stream-bench: paging policies side by side on real model shapes"};
  add_run_options(app, o);
  add_node_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.case_study) apply_case_study(app, o);
  if (o.train && app.count("--sweep") == 0 && app.count("--hbm-budget") == 0)
    o.sweep = "0.3,0.5,0.75";
  return -1;
}

}  // namespace htp::bench
