// htp-plan: the capacity planner. For a model (preset or config.json), a dtype, a tensor-parallel
// split and a machine (a GPU preset, overridable number by number), prints how the weights lay out
// in HBM and host RAM, what is paged per step, the predicted step time against a budget, and what
// would meet it. Exit codes: 0 a plan was made (whether or not it meets the budget), 2 bad input.
// The model and its formulas: docs/planner.md.
#include "model/model_shapes.hpp"
#include "planner/bench_json.hpp"
#include "planner/gpu_presets.hpp"
#include "planner/planner.hpp"

#include <htp/error.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

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
  std::printf("  layer      %.3f GB; per GPU %.1f MiB = %llu pages of %.0f MiB\n", gb(r.layer_bytes),
              mib(r.layer_bytes_per_gpu), static_cast<unsigned long long>(r.pages_per_layer),
              mib(in.page_bytes));
  std::printf("  embeddings %.1f MiB per GPU = %llu pages (always resident)\n",
              mib(r.embedding_bytes_per_gpu), static_cast<unsigned long long>(r.embedding_pages));
  std::printf("  HBM        %.1f GB per GPU, headroom %.2f GB (%.0f%% + KV %.2f GB), %llu pages for "
              "weights, %llu staging\n",
              in.hbm_gb, gb(r.headroom_bytes_per_gpu), in.headroom_fraction * 100,
              gb(r.kv_bytes_per_gpu), static_cast<unsigned long long>(r.weight_pages),
              static_cast<unsigned long long>(r.staging_pages));
  std::printf("  placement  %d resident, %d streamed (%.1f%% resident)%s%s\n", r.resident_layers,
              r.streamed_layers, 100.0 * r.resident_layers / m.layers,
              r.overlap ? "" : ", no overlap", r.degraded ? ", DEGRADED (mapped host)" : "");
  std::printf("  host RAM   %.1f GB needed of %.1f GB\n", gb(r.host_bytes_needed), in.host_gb);
  std::printf("  paging     %llu pages = %.2f GB per GPU per step at %.3f ms/page (%.1f GB/s, %s)\n",
              static_cast<unsigned long long>(r.paged_pages_per_step), gb(r.paged_bytes_per_step),
              r.page_ms, r.link_gbps, r.link_source.c_str());
  std::printf("  step       transfer %.2f ms, compute %.2f ms (memory %.2f, FLOPs %.2f) -> %.2f ms\n",
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

nlohmann::json to_json(const plan_inputs& in, const gpu_spec& gpu, const plan_result& r) {
  const model_shape& m = in.model;
  nlohmann::json j;
  j["tool"] = "htp-plan";
  j["model"] = {{"name", m.name}, {"layers", m.layers}, {"hidden", m.hidden},
                {"intermediate", m.intermediate}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                {"vocab", m.vocab}, {"experts", m.experts},
                {"experts_per_token", m.experts_per_token}, {"parameters", r.parameters},
                {"active_parameters_per_token", active_parameters_per_token(m)}};
  j["inputs"] = {{"dtype", to_string(in.weights)}, {"batch", in.batch}, {"gpus", in.gpus},
                 {"gpu", gpu.name}, {"hbm_gb", in.hbm_gb}, {"hbm_gbps", in.hbm_gbps},
                 {"dense_tflops", in.dense_tflops}, {"host_gb", in.host_gb},
                 {"page_bytes", in.page_bytes}, {"budget_ms", in.budget_ms},
                 {"headroom_fraction", in.headroom_fraction}, {"context", in.context},
                 {"phase", in.mode == phase::decode ? "decode" : "prefill"},
                 {"prompt_tokens", in.prompt_tokens}, {"allow_degraded", in.allow_degraded}};
  j["sizes"] = {{"layer_bytes", r.layer_bytes}, {"layer_bytes_per_gpu", r.layer_bytes_per_gpu},
                {"pages_per_layer", r.pages_per_layer},
                {"embedding_bytes_per_gpu", r.embedding_bytes_per_gpu},
                {"embedding_pages", r.embedding_pages}, {"total_bytes", r.total_bytes},
                {"total_bytes_per_gpu", r.total_bytes_per_gpu},
                {"kv_bytes_per_gpu", r.kv_bytes_per_gpu},
                {"headroom_bytes_per_gpu", r.headroom_bytes_per_gpu},
                {"weight_pages", r.weight_pages}, {"staging_pages", r.staging_pages}};
  j["placement"] = {{"resident_layers", r.resident_layers}, {"streamed_layers", r.streamed_layers},
                    {"overlap", r.overlap}, {"degraded", r.degraded},
                    {"host_bytes_needed", r.host_bytes_needed}};
  j["step"] = {{"paged_pages", r.paged_pages_per_step}, {"paged_bytes", r.paged_bytes_per_step},
               {"link_gbps", r.link_gbps}, {"link_source", r.link_source},
               {"page_ms", r.page_ms}, {"transfer_ms", r.transfer_ms},
               {"memory_ms", r.memory_ms}, {"flop_ms", r.flop_ms},
               {"compute_ms", r.compute_ms}, {"step_ms", r.step_ms},
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"htp-plan: capacity planner (what stays resident, what is paged, step time)"};
  std::string model_name, config_path, dtype_name = "bf16", gpu_name = "H100-SXM", phase_name = "decode";
  std::string bench_json, json_path;
  double hbm_gb = 0, hbm_gbps = 0, tflops = 0, link_gbps = 0;
  std::size_t page_mib = 64;
  plan_inputs in;
  auto* model_opt = app.add_option("--model", model_name, "model preset: " + [] {
    std::string s;
    for (const auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }());
  auto* config_opt = app.add_option("--config", config_path, "a Hugging Face config.json instead of a preset");
  model_opt->excludes(config_opt);
  app.add_option("--dtype", dtype_name, "weight dtype: bf16, fp16, fp8, int8")->capture_default_str();
  app.add_option("--batch", in.batch, "sequences per step")->capture_default_str();
  app.add_option("--gpus", in.gpus, "tensor-parallel GPUs (each holds 1/gpus of every layer)")->capture_default_str();
  app.add_option("--gpu", gpu_name, "GPU preset: A100-40GB, A100-80GB, H100-SXM, H200, GH200")->capture_default_str();
  app.add_option("--hbm-gb", hbm_gb, "HBM per GPU, GB (overrides the preset)");
  app.add_option("--hbm-gbps", hbm_gbps, "HBM bandwidth per GPU, GB/s (overrides the preset)");
  app.add_option("--tflops", tflops, "dense tensor-core TFLOP/s per GPU (overrides the preset)");
  app.add_option("--host-gb", in.host_gb, "pinned host RAM for the whole TP group, GB")->capture_default_str();
  auto* link_opt = app.add_option("--link-gbps", link_gbps, "host->device GB/s per GPU (overrides the preset)");
  auto* page_ms_opt = app.add_option("--page-ms", in.page_ms, "cost of moving one page, ms (instead of the link rate)");
  auto* bench_opt = app.add_option("--bench-json", bench_json,
                                   "htp-bandwidth or stream bench JSON: use its measured H2D rate, compare its step time");
  link_opt->excludes(page_ms_opt)->excludes(bench_opt);
  app.add_option("--page-mib", page_mib, "page (slab) size, MiB")->capture_default_str();
  app.add_option("--budget-ms", in.budget_ms, "step-time budget, ms")->capture_default_str();
  app.add_option("--headroom", in.headroom_fraction, "fraction of HBM kept for activations and workspace")->capture_default_str();
  app.add_option("--context", in.context, "KV-cache tokens per sequence kept in HBM")->capture_default_str();
  app.add_option("--phase", phase_name, "decode or prefill")->check(CLI::IsMember({"decode", "prefill"}))->capture_default_str();
  app.add_option("--prompt-tokens", in.prompt_tokens, "prefill: prompt tokens per sequence")->capture_default_str();
  app.add_flag("--allow-degraded", in.allow_degraded, "when no layer can be staged, read weights from mapped host memory");
  app.add_option("--json", json_path, "write the plan as JSON to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  try {
    if (model_name.empty() == config_path.empty()) {
      throw htp::invalid_argument("give exactly one of --model NAME or --config PATH");
    }
    in.model = model_name.empty() ? from_hf_config(config_path) : preset(model_name);
    in.weights = parse_dtype(dtype_name);
    const gpu_spec gpu = gpu_preset(gpu_name);
    in.hbm_gb = hbm_gb > 0 ? hbm_gb : gpu.hbm_gb;
    in.hbm_gbps = hbm_gbps > 0 ? hbm_gbps : gpu.hbm_gbps;
    in.dense_tflops = tflops > 0 ? tflops : gpu.dense_tflops;
    if (link_opt->count() > 0) {
      in.link_gbps = link_gbps;
      in.link_source = "--link-gbps";
    } else {
      in.link_gbps = gpu.link_gbps;
      in.link_source = gpu.name + " typical measured " + gpu.link;
    }
    if (hbm_gb < 0 || hbm_gbps < 0 || tflops < 0) {
      throw htp::invalid_argument("--hbm-gb, --hbm-gbps and --tflops must be positive");
    }
    if (page_mib == 0 || page_mib > (std::size_t{1} << 20)) {
      throw htp::invalid_argument("--page-mib " + std::to_string(page_mib) +
                                  " must be between 1 and 1048576 (a power of two)");
    }
    in.page_bytes = static_cast<std::uint64_t>(page_mib) << 20;
    in.mode = phase_name == "prefill" ? phase::prefill : phase::decode;
    if (!bench_json.empty()) in.measured = read_bench_json(bench_json);
    const plan_result r = plan(in);
    print(in, gpu, r);
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << to_json(in, gpu, r).dump(2) << "\n";
      if (!out) throw htp::invalid_argument("--json '" + json_path + "' cannot be written");
      std::printf("wrote %s\n", json_path.c_str());
    }
  } catch (const htp::invalid_argument& e) {
    std::fprintf(stderr, "htp-plan: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-plan: %s\n", e.what());
    return 1;
  }
  return 0;
}
