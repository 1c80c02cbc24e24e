// htp-plan: the capacity planner. For a model (preset or config.json), a dtype, a tensor-parallel
// split and a machine (a GPU preset, overridable number by number), prints how the weights lay out
// in HBM and host RAM, what is paged per step, the predicted step time against a budget, and what
// would meet it. Exit codes: 0 a plan was made (whether or not it meets the budget), 2 bad input.
// The model and its formulas: docs/planner.md.
#include "planner/bench_json.hpp"
#include "planner/gpu_presets.hpp"
#include "planner/htp_model.hpp"
#include "planner/matrix.hpp"
#include "planner/planner.hpp"
#include "shared/model_shapes.hpp"

#include <htp/error.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace htp::bench;

double gb(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }
double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void print(const plan_inputs& in, const gpu_spec& gpu, const plan_result& r) {
  const model_shape& m = in.model;
  std::printf("htp-plan: %s, %s, %s, batch %d, %d x %s (TP %d)\n", m.name.c_str(),
              to_string(in.weights), in.mode == phase::decode ? "decode" : "prefill", in.batch,
              in.gpus, gpu.name.c_str(), in.gpus);
  std::printf("  model      %.2fB parameters (%.2fB active per token), %d layers\n",
              static_cast<double>(r.parameters) / 1e9,
              static_cast<double>(active_parameters_per_token(m)) / 1e9, m.layers);
  std::printf("  weights    %.2f GB total, %.2f GB per GPU\n", gb(r.total_bytes),
              gb(r.total_bytes_per_gpu));
  std::printf("  layer      %.3f GB; per GPU %.1f MiB = %llu pages of %.0f MiB\n",
              gb(r.layer_bytes), mib(r.layer_bytes_per_gpu),
              static_cast<unsigned long long>(r.pages_per_layer), mib(in.page_bytes));
  std::printf("  embeddings %.1f MiB per GPU = %llu pages (always resident)\n",
              mib(r.embedding_bytes_per_gpu), static_cast<unsigned long long>(r.embedding_pages));
  std::printf(
      "  HBM        %.1f GB per GPU, headroom %.2f GB (%.0f%% + KV %.2f GB), %llu pages for "
      "weights, %llu staging\n",
      in.hbm_gb, gb(r.headroom_bytes_per_gpu), in.headroom_fraction * 100, gb(r.kv_bytes_per_gpu),
      static_cast<unsigned long long>(r.weight_pages),
      static_cast<unsigned long long>(r.staging_pages));
  std::printf("  placement  %d resident, %d streamed (%.1f%% resident)%s%s\n", r.resident_layers,
              r.streamed_layers, 100.0 * r.resident_layers / m.layers,
              r.overlap ? "" : ", no overlap", r.degraded ? ", DEGRADED (mapped host)" : "");
  std::printf("  host RAM   %.1f GB needed of %.1f GB\n", gb(r.host_bytes_needed), in.host_gb);
  std::printf(
      "  paging     %llu pages = %.2f GB per GPU per step at %.3f ms/page (%.1f GB/s, %s)\n",
      static_cast<unsigned long long>(r.paged_pages_per_step), gb(r.paged_bytes_per_step),
      r.page_ms, r.link_gbps, r.link_source.c_str());
  std::printf(
      "  step       transfer %.2f ms, compute %.2f ms (memory %.2f, FLOPs %.2f) -> %.2f ms\n",
      r.transfer_ms, r.compute_ms, r.memory_ms, r.flop_ms, r.step_ms);
  std::printf("  budget     %.1f ms: %s\n", in.budget_ms, r.meets_budget ? "MEETS" : "MISSES");
  if (r.min_resident_layers >= 0) {
    std::printf("  fewest resident layers that meet it: %d (%.1f%%)\n", r.min_resident_layers,
                100.0 * r.min_resident_layers / m.layers);
  } else {
    std::printf("  no number of resident layers meets it with this HBM\n");
  }
  if (r.largest_batch > 0) {
    std::printf("  largest batch that meets it: %d%s\n", r.largest_batch,
                r.largest_batch == r.batch_search_limit ? " (search limit)" : "");
  } else {
    std::printf("  no batch meets it\n");
  }
  if (r.measured_step_ms > 0) {
    std::printf("  measured   step p50 %.2f ms: prediction off by %+.1f%%\n", r.measured_step_ms,
                r.prediction_error_pct);
  }
  for (const auto& n : r.notes) std::printf("  note: %s\n", n.c_str());
}

void print_htp(const plan_inputs& in, const htp_settings& s, const htp_prediction& h) {
  std::printf("htp model: %s, %s placement (what the library does; docs/planner.md)\n",
              to_string(s.how), to_string(s.where));
  if (!h.feasible) {
    std::printf("  does not fit: %s\n", h.why_not.c_str());
    return;
  }
  std::printf("  HBM        budget %.2f GB per GPU: %d layers resident (%.2f GB with embeddings), "
              "%d paged through "
              "%.2f GB, KV %.2f GB\n",
              h.hbm_budget_bytes / 1e9, h.resident_layers, gb(h.resident_bytes), h.paged_layers,
              gb(h.paging_capacity), gb(h.kv_bytes));
  std::printf("  host RAM   %.1f GB of host tier (paged tensors only) of %.1f GB\n",
              gb(h.host_bytes), in.host_gb);
  std::printf("  paging     %.2f GB per GPU per step (Belady's rule, %llu KiB pages) at %.1f GB/s "
              "(%.0f%% cap of "
              "%.1f GB/s, %llu MiB chunks, %.1f us each)\n",
              h.paged_bytes_per_step / 1e9,
              static_cast<unsigned long long>(s.alloc_page_bytes >> 10), h.link_gbps,
              s.link_cap_fraction * 100, s.link_peak_gbps > 0 ? s.link_peak_gbps : in.link_gbps,
              static_cast<unsigned long long>(s.chunk_bytes >> 20), s.copy_latency_us);
  std::printf("  step       %.2f ms (transfer %.2f ms, compute %.2f ms, collective %.3f ms per "
              "layer): %s, %.1f tokens/s\n",
              h.step_ms, h.transfer_ms, h.compute_ms, h.collective_ms_per_layer,
              h.meets_budget ? "MEETS" : "MISSES", h.tokens_per_second);
  if (in.measured.step_ms_p50 > 0) {
    std::printf("  measured   step p50 %.2f ms: htp model off by %+.1f%%\n",
                in.measured.step_ms_p50,
                (h.step_ms - in.measured.step_ms_p50) / in.measured.step_ms_p50 * 100.0);
  }
}

nlohmann::json to_json(const htp_settings& s, const htp_prediction& h, double measured) {
  nlohmann::json j = {
      {"strategy", to_string(s.how)}, {"placement", to_string(s.where)}, {"feasible", h.feasible}};
  if (!h.feasible) {
    j["why_not"] = h.why_not;
    return j;
  }
  j.update({{"hbm_budget_bytes", h.hbm_budget_bytes},
            {"resident_layers", h.resident_layers},
            {"paged_layers", h.paged_layers},
            {"resident_bytes", h.resident_bytes},
            {"kv_bytes", h.kv_bytes},
            {"paging_capacity_bytes", h.paging_capacity},
            {"host_bytes", h.host_bytes},
            {"paged_bytes_per_step", h.paged_bytes_per_step},
            {"link_gbps", h.link_gbps},
            {"link_cap_fraction", s.link_cap_fraction},
            {"transfer_ms", h.transfer_ms},
            {"compute_ms", h.compute_ms},
            {"collective_ms_per_layer", h.collective_ms_per_layer},
            {"step_ms", h.step_ms},
            {"tokens_per_second", h.tokens_per_second},
            {"meets_budget", h.meets_budget}});
  if (measured > 0) {
    j["measured_step_ms_p50"] = measured;
    j["prediction_error_pct"] = (h.step_ms - measured) / measured * 100.0;
  }
  return j;
}

void print_matrix(const std::vector<matrix_row>& rows, double budget_ms, int context) {
  std::printf("trade-off matrix: step ms / tokens per s per cell (htp model; KV cache of %d tokens "
              "per sequence; "
              "* meets the %.0f ms budget)\n",
              context, budget_ms);
  std::printf("  %-24s", "strategy \\ batch");
  for (const auto& c : rows.front().cells) std::printf(" %22d", c.batch);
  std::printf("\n");
  for (const auto& r : rows) {
    std::printf("  %-24s", r.strategy.c_str());
    for (const auto& c : r.cells) {
      if (!c.feasible) {
        std::printf(" %22s", "does not fit");
        continue;
      }
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.1f ms %.0f tok/s%s", c.step_ms, c.tokens_per_second,
                    c.meets_budget ? "*" : " ");
      std::printf(" %22s", cell);
    }
    std::printf("\n");
  }
  for (const auto& r : rows) {
    for (const auto& c : r.cells) {
      if (!c.feasible) {
        std::printf("  %s, batch %d: %s\n", r.strategy.c_str(), c.batch, c.why_not.c_str());
        break;
      }
    }
  }
}

nlohmann::json to_json(const std::vector<matrix_row>& rows, double budget_ms, int context) {
  nlohmann::json j = {
      {"budget_ms", budget_ms}, {"context", context}, {"rows", nlohmann::json::array()}};
  for (const auto& r : rows) {
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& c : r.cells) {
      nlohmann::json cj = {{"batch", c.batch}, {"feasible", c.feasible}};
      if (c.feasible) {
        cj.update({{"step_ms", c.step_ms},
                   {"tokens_per_second", c.tokens_per_second},
                   {"meets_budget", c.meets_budget}});
      } else {
        cj["why_not"] = c.why_not;
      }
      cells.push_back(cj);
    }
    j["rows"].push_back({{"strategy", r.strategy}, {"cells", cells}});
  }
  return j;
}

nlohmann::json to_json(const plan_inputs& in, const gpu_spec& gpu, const plan_result& r) {
  const model_shape& m = in.model;
  nlohmann::json j;
  j["tool"] = "htp-plan";
  j["model"] = {{"name", m.name},
                {"layers", m.layers},
                {"hidden", m.hidden},
                {"intermediate", m.intermediate},
                {"heads", m.heads},
                {"kv_heads", m.kv_heads},
                {"vocab", m.vocab},
                {"experts", m.experts},
                {"experts_per_token", m.experts_per_token},
                {"parameters", r.parameters},
                {"active_parameters_per_token", active_parameters_per_token(m)}};
  j["inputs"] = {{"dtype", to_string(in.weights)},
                 {"batch", in.batch},
                 {"gpus", in.gpus},
                 {"gpu", gpu.name},
                 {"hbm_gb", in.hbm_gb},
                 {"hbm_gbps", in.hbm_gbps},
                 {"dense_tflops", in.dense_tflops},
                 {"host_gb", in.host_gb},
                 {"host_copies", in.copies == host_copies::per_node ? "node" : "process"},
                 {"page_bytes", in.page_bytes},
                 {"budget_ms", in.budget_ms},
                 {"headroom_fraction", in.headroom_fraction},
                 {"context", in.context},
                 {"phase", in.mode == phase::decode ? "decode" : "prefill"},
                 {"prompt_tokens", in.prompt_tokens},
                 {"allow_degraded", in.allow_degraded}};
  j["sizes"] = {{"layer_bytes", r.layer_bytes},
                {"layer_bytes_per_gpu", r.layer_bytes_per_gpu},
                {"pages_per_layer", r.pages_per_layer},
                {"embedding_bytes_per_gpu", r.embedding_bytes_per_gpu},
                {"embedding_pages", r.embedding_pages},
                {"total_bytes", r.total_bytes},
                {"total_bytes_per_gpu", r.total_bytes_per_gpu},
                {"kv_bytes_per_gpu", r.kv_bytes_per_gpu},
                {"headroom_bytes_per_gpu", r.headroom_bytes_per_gpu},
                {"weight_pages", r.weight_pages},
                {"staging_pages", r.staging_pages}};
  j["placement"] = {{"resident_layers", r.resident_layers},
                    {"streamed_layers", r.streamed_layers},
                    {"overlap", r.overlap},
                    {"degraded", r.degraded},
                    {"host_bytes_needed", r.host_bytes_needed}};
  j["step"] = {{"paged_pages", r.paged_pages_per_step},
               {"paged_bytes", r.paged_bytes_per_step},
               {"link_gbps", r.link_gbps},
               {"link_source", r.link_source},
               {"page_ms", r.page_ms},
               {"transfer_ms", r.transfer_ms},
               {"memory_ms", r.memory_ms},
               {"flop_ms", r.flop_ms},
               {"compute_ms", r.compute_ms},
               {"step_ms", r.step_ms},
               {"meets_budget", r.meets_budget}};
  j["fits"] = {{"min_resident_layers", r.min_resident_layers},
               {"largest_batch", r.largest_batch},
               {"batch_search_limit", r.batch_search_limit}};
  if (r.measured_step_ms > 0) {
    j["measured"] = {{"step_ms_p50", r.measured_step_ms},
                     {"prediction_error_pct", r.prediction_error_pct}};
  }
  j["notes"] = r.notes;
  return j;
}

/// htp-plan's options: the design arithmetic's inputs (`in`) and the htp model's settings (`hs`)
/// as parsed, and the options that fill them in once the GPU preset is known.
struct plan_options {
  std::string model_name, config_path, dtype_name = "bf16", gpu_name = "H100-SXM",
                                       phase_name = "decode";
  std::string bench_json, json_path;
  double hbm_gb = 0, hbm_gbps = 0, tflops = 0, link_gbps = 0;
  bool link_given = false;  ///< --link-gbps was given
  std::size_t page_mib = 64;
  plan_inputs in;
  htp_settings hs;
  std::string placement_name = "resident", strategy_name = "tensor-parallel",
              batches_arg = "1,4,16,64";
  double budget_gb = 0, chunk_mib = 2;
  bool layers_only = false, matrix = false;
};

/// Adds the htp model's options (docs/planner.md, "The htp model") to `app`.
void add_htp_model_options(CLI::App& app, plan_options& o) {
  htp_settings& hs = o.hs;
  app.add_option("--hbm-budget-gb", o.budget_gb,
                 "htp model: the pager's HBM budget per GPU, GB (default: the device's "
                 "exposed HBM less --headroom and the KV cache)");
  app.add_option("--placement", o.placement_name,
                 "htp model: resident (layers resident beside a paging window) or paged")
      ->check(CLI::IsMember({"resident", "paged"}))
      ->capture_default_str();
  app.add_option("--strategy", o.strategy_name,
                 "htp model: tensor-parallel, swap-and-shard or degraded")
      ->check(CLI::IsMember({"tensor-parallel", "swap-and-shard", "degraded"}))
      ->capture_default_str();
  app.add_option("--link-cap", hs.link_cap_fraction,
                 "htp model: the token bucket's cap, a fraction of the link peak (1: uncapped)")
      ->capture_default_str();
  app.add_option("--link-peak-gbps", hs.link_peak_gbps,
                 "htp model: the calibrated copy peak the cap applies to (default: "
                 "the link rate, or the stream bench's calibration)");
  app.add_option("--copy-latency-us", hs.copy_latency_us, "htp model: fixed cost of one copy")
      ->capture_default_str();
  app.add_option("--chunk-mib", o.chunk_mib, "htp model: transfer chunk, MiB")
      ->capture_default_str();
  app.add_option("--interconnect-gbps", hs.interconnect_gbps,
                 "htp model: GPU-to-GPU GB/s for collectives")
      ->capture_default_str();
  app.add_option("--collective-latency-us", hs.collective_latency_us,
                 "htp model: fixed cost of one collective")
      ->capture_default_str();
  app.add_option("--compress-ratio", hs.compression_ratio,
                 "htp model: paged weights stored compressed at this wire/logical ratio (1: "
                 "uncompressed; 0.68: bf16 Llama-like weights, docs/codec.md); not for degraded")
      ->capture_default_str();
  app.add_option("--decode-gbps", hs.decode_gbps,
                 "htp model: device decode rate of compressed weights, GB/s of decoded bytes")
      ->capture_default_str();
  app.add_option("--lookahead", hs.lookahead,
                 "htp model: tensors prefetched ahead (0: two layers' worth)")
      ->capture_default_str();
  app.add_flag("--layers-only", o.layers_only,
               "htp model: the decoder layers only, no embeddings (as htp-stream-bench runs)");
  app.add_flag("--matrix", o.matrix,
               "print the trade-off matrix: strategies against batch sizes (--matrix-batches)");
  app.add_option("--matrix-batches", o.batches_arg, "batch sizes of the matrix, comma-separated")
      ->capture_default_str();
}

/// Parses argv into `o`. Returns -1 to go on, or the exit code to return now (0 after --help, 2
/// for a bad command line, which it has reported).
int parse_options(int argc, char** argv, plan_options& o) {
  CLI::App app{"htp-plan: capacity planner (what stays resident, what is paged, step time)"};
  plan_inputs& in = o.in;
  auto* model_opt = app.add_option(
      "--model", o.model_name, "model preset: " + [] {
        std::string s;
        for (const auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
        return s;
      }());
  auto* config_opt =
      app.add_option("--config", o.config_path, "a Hugging Face config.json instead of a preset");
  model_opt->excludes(config_opt);
  app.add_option("--dtype", o.dtype_name, "weight dtype: bf16, fp16, fp8, int8")
      ->capture_default_str();
  app.add_option("--batch", in.batch, "sequences per step")->capture_default_str();
  app.add_option("--gpus", in.gpus, "tensor-parallel GPUs (each holds 1/gpus of every layer)")
      ->capture_default_str();
  app.add_option("--gpu", o.gpu_name, "GPU preset: A100-40GB, A100-80GB, H100-SXM, H200, GH200")
      ->capture_default_str();
  app.add_option("--hbm-gb", o.hbm_gb, "HBM per GPU, GB (overrides the preset)");
  app.add_option("--hbm-gbps", o.hbm_gbps, "HBM bandwidth per GPU, GB/s (overrides the preset)");
  app.add_option("--tflops", o.tflops, "dense tensor-core TFLOP/s per GPU (overrides the preset)");
  app.add_option("--host-gb", in.host_gb, "pinned host RAM of the node (the whole TP group), GB")
      ->capture_default_str();
  app.add_option("--host-copies", in.copies,
                 "who holds the streamed layers' host copies: node (one copy per node: one "
                 "process, or a process per GPU over htp's shared tier) or process (each process "
                 "of a process-per-GPU job pins its own copy of the model it loaded)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, host_copies>{{"node", host_copies::per_node},
                                             {"process", host_copies::per_process}},
          CLI::ignore_case))
      ->capture_default_str();
  auto* link_opt = app.add_option("--link-gbps", o.link_gbps,
                                  "host->device GB/s per GPU (overrides the preset)");
  auto* page_ms_opt = app.add_option("--page-ms", in.page_ms,
                                     "cost of moving one page, ms (instead of the link rate)");
  app.add_option(
      "--bench-json", o.bench_json,
      "htp-bandwidth or stream bench JSON: use its measured H2D rate, compare its step time");
  link_opt->excludes(page_ms_opt);
  app.add_option("--page-mib", o.page_mib, "page (slab) size, MiB")->capture_default_str();
  app.add_option("--budget-ms", in.budget_ms, "step-time budget, ms")->capture_default_str();
  app.add_option("--headroom", in.headroom_fraction,
                 "fraction of HBM kept for activations and workspace")
      ->capture_default_str();
  app.add_option("--context", in.context, "KV-cache tokens per sequence kept in HBM")
      ->capture_default_str();
  app.add_option("--phase", o.phase_name, "decode or prefill")
      ->check(CLI::IsMember({"decode", "prefill"}))
      ->capture_default_str();
  app.add_option("--prompt-tokens", in.prompt_tokens, "prefill: prompt tokens per sequence")
      ->capture_default_str();
  app.add_flag("--allow-degraded", in.allow_degraded,
               "when no layer can be staged, read weights from mapped host memory");
  app.add_option("--json", o.json_path, "write the plan as JSON to this file");
  add_htp_model_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  o.link_given = link_opt->count() > 0;
  return -1;
}

/// Fills in o.in (the model, the dtype, the GPU's numbers unless overridden, the page, the phase
/// and a bench run's measurements) and checks it; returns the GPU preset.
/// @throws htp::invalid_argument for bad input.
gpu_spec resolve_inputs(plan_options& o) {
  plan_inputs& in = o.in;
  if (o.model_name.empty() == o.config_path.empty()) {
    throw htp::invalid_argument("give exactly one of --model NAME or --config PATH");
  }
  in.model = o.model_name.empty() ? from_hf_config(o.config_path) : preset(o.model_name);
  in.weights = parse_dtype(o.dtype_name);
  const gpu_spec gpu = gpu_preset(o.gpu_name);
  in.hbm_gb = o.hbm_gb > 0 ? o.hbm_gb : gpu.hbm_gb;
  in.hbm_gbps = o.hbm_gbps > 0 ? o.hbm_gbps : gpu.hbm_gbps;
  in.dense_tflops = o.tflops > 0 ? o.tflops : gpu.dense_tflops;
  if (o.link_given) {
    in.link_gbps = o.link_gbps;
    in.link_source = "--link-gbps";
  } else {
    in.link_gbps = gpu.link_gbps;
    in.link_source = gpu.name + " typical measured " + gpu.link;
  }
  if (o.hbm_gb < 0 || o.hbm_gbps < 0 || o.tflops < 0) {
    throw htp::invalid_argument("--hbm-gb, --hbm-gbps and --tflops must be positive");
  }
  if (o.page_mib == 0 || o.page_mib > (std::size_t{1} << 20)) {
    throw htp::invalid_argument("--page-mib " + std::to_string(o.page_mib) +
                                " must be between 1 and 1048576 (a power of two)");
  }
  in.page_bytes = static_cast<std::uint64_t>(o.page_mib) << 20;
  in.mode = o.phase_name == "prefill" ? phase::prefill : phase::decode;
  if (!o.bench_json.empty()) {
    // A node-only run's step: the mode the htp model is asked about.
    in.measured = read_bench_json(o.bench_json, in.gpus > 1 ? o.strategy_name : "");
    // An explicit --link-gbps wins over the run's achieved rate in the design arithmetic too.
    if (o.link_given) in.measured.h2d_gbps = 0;
  }
  check_inputs(in);  // bad input is exit 2 for both models; only layouts fall through below
  return gpu;
}

/// Fills in o.hs, the htp model's settings, from the options and the GPU preset.
/// @throws htp::invalid_argument for a chunk that is not positive.
void resolve_htp_settings(plan_options& o, const gpu_spec& gpu) {
  htp_settings& hs = o.hs;
  hs.where = o.placement_name == "paged" ? placement::paged : placement::resident;
  hs.how = o.strategy_name == "swap-and-shard" ? strategy::swap_and_shard
           : o.strategy_name == "degraded"     ? strategy::degraded
                                               : strategy::tensor_parallel;
  hs.hbm_budget_bytes = o.budget_gb * 1e9;
  hs.hbm_exposed_gb = o.hbm_gb > 0 ? o.hbm_gb : gpu.hbm_exposed_gb;
  if (hs.link_peak_gbps <= 0 && o.in.measured.link_peak_gbps > 0)
    hs.link_peak_gbps = o.in.measured.link_peak_gbps;
  if (!(o.chunk_mib > 0)) throw htp::invalid_argument("--chunk-mib must be positive");
  hs.chunk_bytes = static_cast<std::uint64_t>(o.chunk_mib * 1048576.0);
  hs.embeddings = !o.layers_only;
}

/// The htp model's inputs: the design's, with the link's own rate (the stream bench's calibration,
/// or htp-bandwidth's fitted peak) rather than the rate a paging run achieved on it, or the rate
/// --page-ms implies.
plan_inputs htp_model_inputs(const plan_options& o) {
  const plan_inputs& in = o.in;
  plan_inputs hin = in;
  if (in.page_ms <= 0 && !o.link_given) {
    if (in.measured.link_peak_gbps > 0) {
      hin.link_gbps = in.measured.link_peak_gbps;
    } else if (in.measured.h2d_gbps > 0 && in.measured.step_ms_p50 == 0) {
      hin.link_gbps = in.measured.h2d_gbps;
    }
  }
  if (in.page_ms > 0)
    hin.link_gbps = static_cast<double>(in.page_bytes) / (in.page_ms * 1e-3) / 1e9;
  return hin;
}

/// --matrix-batches as numbers. @throws htp::invalid_argument for one that is not a whole number.
std::vector<int> parse_batches(const std::string& batches_arg) {
  std::vector<int> batches;
  std::stringstream ss(batches_arg);
  for (std::string x; std::getline(ss, x, ',');) {
    try {
      batches.push_back(std::stoi(x));
    } catch (const std::exception&) {
      throw htp::invalid_argument("--matrix-batches '" + batches_arg + "': '" + x +
                                  "' is not a whole number");
    }
  }
  return batches;
}

/// Plans, prints and (with --json) writes: the design arithmetic, the htp model and the trade-off
/// matrix. @throws htp::invalid_argument for bad input or an unwritable --json.
void run(plan_options& o) {
  const gpu_spec gpu = resolve_inputs(o);
  resolve_htp_settings(o, gpu);
  const plan_inputs& in = o.in;
  // The design's arithmetic first (its inputs are checked there), then the htp model.
  plan_result r;
  std::string design_error;
  try {
    r = plan(in);
  } catch (const htp::invalid_argument& e) {
    design_error = e.what();
  }
  const plan_inputs hin = htp_model_inputs(o);
  const htp_prediction h = predict_htp(hin, o.hs);
  if (design_error.empty()) {
    print(in, gpu, r);
  } else {
    std::printf("design arithmetic: %s\n", design_error.c_str());
  }
  print_htp(hin, o.hs, h);
  std::vector<matrix_row> rows;
  const int matrix_context = in.context > 0 ? in.context : 512;
  if (o.matrix) {
    const std::vector<int> batches = parse_batches(o.batches_arg);
    plan_inputs min = hin;
    min.context = matrix_context;
    rows = trade_off_matrix(min, o.hs, batches);
    print_matrix(rows, in.budget_ms, matrix_context);
  }
  if (!design_error.empty() && !h.feasible) throw htp::invalid_argument(design_error);
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    nlohmann::json j = design_error.empty()
                           ? to_json(in, gpu, r)
                           : nlohmann::json{{"tool", "htp-plan"}, {"design_error", design_error}};
    j["htp"] = to_json(o.hs, h, in.measured.step_ms_p50);
    if (o.matrix) j["matrix"] = to_json(rows, in.budget_ms, matrix_context);
    out << j.dump(2) << "\n";
    if (!out) throw htp::invalid_argument("--json '" + o.json_path + "' cannot be written");
    std::printf("wrote %s\n", o.json_path.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  plan_options o;
  if (const int rc = parse_options(argc, argv, o); rc >= 0) return rc;
  try {
    run(o);
  } catch (const htp::invalid_argument& e) {
    std::fprintf(stderr, "htp-plan: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-plan: %s\n", e.what());
    return 1;
  }
  return 0;
}
