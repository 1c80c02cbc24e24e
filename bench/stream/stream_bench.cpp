// htp-stream-bench: a model runner's decode or prefill steps over paged weights, with the paging
// policies side by side on the same model, device and HBM budget, against a latency budget.
// See docs/benchmarks.md.
#include <htp/device.hpp>
#include <htp/error.hpp>
#include <htp/log.hpp>
#include <htp/sim_device.hpp>
#include <htp/slab_allocator.hpp>
#include <htp/transfer_engine.hpp>

#include "compute.hpp"
#include "shared/model_shapes.hpp"
#include "report.hpp"
#include "node_report.hpp"
#include "runner.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <unistd.h>

namespace {

using namespace htp;
using namespace htp::bench;

/// "0.5" = that fraction of the streamed weights; "8GiB", "512MiB", "3GB" = bytes.
std::size_t parse_budget(const std::string& s, std::uint64_t model_bytes) {
  std::size_t pos = 0;
  const double v = std::stod(s, &pos);
  const std::string unit = s.substr(pos);
  if (unit.empty()) {
    if (v <= 0 || v > 64) throw invalid_argument("--hbm-budget " + s + ": a fraction must be in (0, 64]");
    return static_cast<std::size_t>(v * static_cast<double>(model_bytes));
  }
  const double mult = unit == "GiB" ? 1073741824.0 : unit == "MiB" ? 1048576.0 : unit == "GB" ? 1e9 : unit == "MB" ? 1e6 : 0;
  if (mult == 0) throw invalid_argument("--hbm-budget " + s + ": unit must be GiB, MiB, GB or MB (or none for a fraction)");
  return static_cast<std::size_t>(v * mult);
}

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / 1073741824.0);
  return b;
}

std::uint64_t host_ram_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"htp-stream-bench: paging policies side by side on real model shapes"};
  std::string model_name = "llama-3.1-8b", config_path, dtype_name = "bf16", backend_name = "auto";
  int layers = 0, tokens = 1, steps = 4, warmup = 1, kv_context = 0, kv_block = 256;
  std::string budget = "0.5", sweep, policies_arg = "all", json_path, trace_path, trace_policy = "schedule-k2";
  double slab_mib = 64, page_kib = 64, chunk_mib = 2, rate_gbps = 0, budget_ms = 200;
  double sim_link_gbps = 4, sim_latency_us = 5, sim_compute_gbps = 0;
  std::string sim_compute = "modelled";
  std::uint64_t seed = 1;
  std::size_t gpus = 0;
  std::string node_modes = "data-parallel,tensor-parallel,swap-and-shard";
  double interconnect_gbps = 0, shared_link_gbps = 0;
  bool timing_only = false, node_only = false, resident = false, case_study = false;
  double time_scale = 1, squeeze_mib = 0, tail_budget_ms = 2000;
  double model_link_gbps = 0, model_latency_us = 0, model_compute_gbps = 0;  // before dilation
  std::string host_budget;
  app.add_option("--model", model_name, "preset: llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, mixtral-8x7b, gpt3-175b");
  app.add_option("--config", config_path, "a Hugging Face config.json instead of a preset");
  app.add_option("--dtype", dtype_name, "bf16, fp16, fp8 or int8");
  app.add_option("--layers", layers, "layers to run, with the real layer shape (default: all on a GPU, 8 on sim)");
  app.add_option("--tokens", tokens, "tokens per step: the decode batch, or the prefill length");
  app.add_option("--steps", steps, "timed steps per policy");
  app.add_option("--warmup", warmup, "warm-up steps per policy (not timed)");
  app.add_option("--hbm-budget", budget, "HBM budget: a fraction of the streamed weights (0.5) or bytes (8GiB)");
  app.add_option("--sweep", sweep, "comma-separated budgets to sweep (e.g. 0.25,0.5,0.75)");
  app.add_option("--policies", policies_arg, "all, or a comma-separated subset of the policy names");
  app.add_option("--backend", backend_name, "auto, cuda or sim")->check(CLI::IsMember({"auto", "cuda", "sim"}));
  app.add_option("--slab-mib", slab_mib, "slab (reservation unit) size in MiB, a power of two");
  app.add_option("--page-kib", page_kib, "page (allocation unit) size in KiB, a power of two up to a slab");
  app.add_option("--chunk-mib", chunk_mib, "transfer chunk size in MiB");
  app.add_option("--rate-gbps", rate_gbps, "cap H2D/D2H at this rate (0 = uncapped)");
  app.add_option("--kv-context", kv_context, "initial KV-cache context in tokens (0 = no KV cache)");
  app.add_option("--kv-block", kv_block, "tokens per KV block tensor");
  app.add_option("--budget-ms", budget_ms, "end-to-end latency budget per step");
  app.add_option("--json", json_path, "write all results and the configuration as JSON");
  app.add_option("--trace", trace_path, "write a Chrome/Perfetto trace of one policy");
  app.add_option("--trace-policy", trace_policy, "the policy to trace");
  app.add_option("--sim-link-gbps", sim_link_gbps, "sim: modelled host link, GB/s each way");
  app.add_option("--sim-latency-us", sim_latency_us, "sim: modelled per-copy latency");
  app.add_option("--sim-compute", sim_compute, "sim: 'modelled' (device time from HBM bandwidth) or 'checksum' (read every byte on the CPU)");
  app.add_option("--sim-compute-gbps", sim_compute_gbps,
                 "sim: HBM rate of the modelled compute (default: 87x the link, an H200's 4.8 TB/s over 55 GB/s)");
  app.add_option("--seed", seed, "payload and routing seed");
  int fail_gpu = -1, fail_at_step = -1;
  app.add_option("--fail-gpu", fail_gpu, "for tests: this GPU's thread of a --gpus run throws at --fail-at-step "
                 "(the run must end with its error, every other rank released; also HTP_STREAM_BENCH_FAIL=GPU:STEP)");
  app.add_option("--fail-at-step", fail_at_step, "for tests: the step (warm-up included) at which --fail-gpu throws");
  app.add_option("--gpus", gpus, "also run on a node of N GPUs (sim: N sim devices; cuda: the first N GPUs) in "
                                 "--node-modes, after the single-GPU policies, at the same per-GPU HBM budgets");
  app.add_option("--node-modes", node_modes, "comma-separated: data-parallel, tensor-parallel, swap-and-shard");
  app.add_option("--interconnect-gbps", interconnect_gbps,
                 "sim --gpus: modelled NVLink per GPU for collectives (default: 450/55 x the link)");
  app.add_option("--shared-link-gbps", shared_link_gbps, "sim --gpus: one H2D link all GPUs share upstream (0 = none)");
  app.add_flag("--timing-only", timing_only,
               "sim: timing-only devices (no bytes stored or moved, checksums off): full-size models on a small machine");
  app.add_flag("--node-only", node_only, "with --gpus: run only the node modes, not the single-GPU policies");
  app.add_flag("--resident", resident,
               "--gpus tensor-parallel: keep most layers' shards device-resident where HBM allows, page the rest (spread among them)");
  app.add_option("--host-budget", host_budget, "--gpus: the node's host tier (bytes, e.g. 256GB; default: what the mode needs)");
  app.add_option("--sim-time-scale", time_scale,
                 "sim: run S times slower than modelled (rates / S, latency x S) and report times / S, so "
                 "the simulation's own per-operation cost shrinks S-fold against the modelled times");
  app.add_option("--hbm-squeeze-mib", squeeze_mib,
                 "--gpus tensor-parallel: run it again with HBM forced short: after the warm-up a resident block leaves only "
                 "this many MiB to paged tensors, and what does not fit is served from host memory (degraded)");
  app.add_option("--tail-budget-ms", tail_budget_ms, "the tail budget the HBM-short run's p99.9 is held against");
  app.add_flag("--case-study", case_study,
               "the design's worked example: opt-175b in fp16 on 8 GPUs of 40 GB, 256 GB of host RAM, tensor-parallel "
               "(resident where possible) and swap-and-shard, timing-only sim (docs/case_study.md); other flags still apply");
  CLI11_PARSE(app, argc, argv);
  if (case_study) {
    // Flags given explicitly still win over the preset's values.
    const auto unset = [&](const char* name) { return app.count(name) == 0; };
    model_name = "opt-175b";
    dtype_name = "fp16";
    if (unset("--gpus")) gpus = 8;
    if (unset("--hbm-budget")) budget = "40GB";
    if (unset("--host-budget")) host_budget = "256GB";
    if (unset("--node-modes")) node_modes = "tensor-parallel,swap-and-shard";
    if (unset("--backend")) backend_name = "sim";
    if (unset("--sim-link-gbps")) sim_link_gbps = 55;           // PCIe Gen5 x16, as measured on H100/H200 hosts
    if (unset("--sim-compute-gbps")) sim_compute_gbps = 3350;   // an H100 SXM's HBM3
    if (unset("--steps")) steps = 8;
    if (unset("--warmup")) warmup = 2;
    // The design's 64 MiB pages as transfer chunks: a fault waits behind at most one (1.5 ms at
    // 44 GB/s), and 8 GPUs' modelled copies on a 2-core machine wake their threads 32x less often.
    if (unset("--chunk-mib")) chunk_mib = 64;
    if (unset("--sim-time-scale")) time_scale = 10;  // docs/case_study.md: the simulation's cost
    // The out-of-memory fallback: 128 MiB left to paging, less than the largest shard (fc1, 151 MB).
    if (unset("--hbm-squeeze-mib")) squeeze_mib = 128;
    layers = 0;
    timing_only = node_only = resident = true;
  }

  bench_config cfg;
  std::unique_ptr<device> dev;
  std::unique_ptr<layer_compute> compute;
  std::vector<policy> pols;
  std::vector<std::size_t> budgets;
  try {
    cfg.model = config_path.empty() ? preset(model_name) : from_hf_config(config_path);
    cfg.type = parse_dtype(dtype_name);
    const bool want_sim = backend_name == "sim" || (backend_name == "auto" && cuda_device_count() == 0);
    if (timing_only && !want_sim) throw invalid_argument("--timing-only is a sim mode; add --backend sim");
    if (timing_only && sim_compute != "modelled") throw invalid_argument("--timing-only needs --sim-compute modelled (no bytes to checksum)");
    if (node_only && gpus == 0) throw invalid_argument("--node-only needs --gpus N");
    if (!(time_scale >= 1)) throw invalid_argument("--sim-time-scale must be at least 1");
    if (time_scale != 1 && !want_sim) throw invalid_argument("--sim-time-scale needs --backend sim");
    // Dilation: every modelled rate S times slower, the per-copy latency S times longer.
    model_link_gbps = sim_link_gbps;
    model_latency_us = sim_latency_us;
    if (want_sim) {
      sim_link_gbps /= time_scale;
      sim_latency_us *= time_scale;
      if (sim_compute_gbps <= 0) sim_compute_gbps = model_link_gbps * 4800.0 / 55.0;  // an H200 over its PCIe
      sim_compute_gbps /= time_scale;
      if (interconnect_gbps <= 0) interconnect_gbps = model_link_gbps * 450.0 / 55.0;  // NVLink 4 over PCIe
      interconnect_gbps /= time_scale;
      shared_link_gbps /= time_scale;
    }
    model_compute_gbps = sim_compute_gbps * time_scale;
    if (layers <= 0) layers = want_sim && !timing_only ? std::min(8, cfg.model.layers) : cfg.model.layers;
    if (layers > cfg.model.layers) {
      throw invalid_argument("--layers " + std::to_string(layers) + ": " + cfg.model.name + " has " +
                             std::to_string(cfg.model.layers));
    }
    if (tokens < 1 || steps < 1 || warmup < 0) throw invalid_argument("--tokens and --steps must be >= 1, --warmup >= 0");
    cfg.layers = layers;
    cfg.tokens = tokens;
    cfg.steps = steps;
    cfg.warmup_steps = warmup;
    cfg.slab_bytes = static_cast<std::size_t>(slab_mib * 1048576.0);
    cfg.page_bytes = static_cast<std::size_t>(page_kib * 1024.0);
    cfg.chunk_bytes = static_cast<std::size_t>(chunk_mib * 1048576.0);
    cfg.kv_context_tokens = kv_context;
    cfg.kv_block_tokens = kv_block;
    cfg.latency_budget = std::chrono::milliseconds(static_cast<long>(budget_ms));
    cfg.seed = seed;
    // A cap is a rate: dilated with the sim's modelled link (time_scale is 1 on cuda).
    if (rate_gbps > 0) cfg.rate_bytes_per_second = static_cast<std::uint64_t>(rate_gbps * 1e9 / time_scale);
    const std::uint64_t model_bytes = streamed_weight_bytes(cfg);
    const std::uint64_t layer_bytes = largest_layer_bytes(cfg);
    for (const auto& s : (sweep.empty() ? std::vector<std::string>{budget} : [&] {
           std::vector<std::string> v;
           std::stringstream ss(sweep);
           for (std::string x; std::getline(ss, x, ',');) v.push_back(x);
           return v;
         }())) {
      const std::size_t b = parse_budget(s, model_bytes);
      if (b < layer_bytes + 2 * cfg.slab_bytes) {
        throw invalid_argument("HBM budget " + gib(static_cast<double>(b)) + " is smaller than one layer's working set (" +
                               gib(static_cast<double>(layer_bytes)) + " plus two slabs of headroom); give at least " +
                               gib(static_cast<double>(layer_bytes + 2 * cfg.slab_bytes)));
      }
      budgets.push_back(b);
    }
    // A note, not a refusal: a microVM's MemTotal can read far below the RAM it can use (it grows
    // as the guest touches memory). A host that really cannot pin the weights fails at the pin,
    // with out_of_memory naming the host's free memory.
    const std::uint64_t ram = host_ram_bytes();
    if (ram != 0 && !timing_only && model_bytes + kv_bytes_at_end(cfg) > ram * 7 / 10) {
      std::fprintf(stderr,
                   "htp-stream-bench: note: %d layers (%s) are more than 70%% of the %s MemTotal reports; "
                   "pinning them may fail (then use fewer --layers)\n",
                   layers, gib(static_cast<double>(model_bytes)).c_str(), gib(static_cast<double>(ram)).c_str());
    }
    if (want_sim) {
      sim_config sc;
      sc.device_memory_bytes = std::max<std::size_t>(*std::max_element(budgets.begin(), budgets.end()),
                                                     static_cast<std::size_t>(model_bytes * 3 / 2)) +
                               static_cast<std::size_t>(kv_bytes_at_end(cfg) * 2) + (std::size_t{1} << 30);
      sc.h2d_bytes_per_second = static_cast<std::uint64_t>(sim_link_gbps * 1e9);
      sc.d2h_bytes_per_second = sc.h2d_bytes_per_second;
      sc.copy_latency_ns = static_cast<std::uint64_t>(sim_latency_us * 1e3);
      sc.poison_byte = -1;
      sc.timing_only = timing_only;
      dev = make_sim_device(sc);
      compute = make_sim_compute(*dev, sim_compute, sim_compute_gbps);
    } else {
      dev = make_device(backend::cuda);
      compute = make_cuda_compute(*dev, cfg.type, tokens, cfg.model);
    }
    for (const auto& p : standard_policies()) {
      if (policies_arg == "all" || ("," + policies_arg + ",").find("," + p.name + ",") != std::string::npos) pols.push_back(p);
    }
    if (pols.empty()) throw invalid_argument("--policies " + policies_arg + " names no known policy");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-stream-bench: %s\n", e.what());
    return 2;
  }

  const auto& props = dev->properties();
  const bool sim = props.kind == backend::sim;
  // One calibration for all policies: the raw copy peak the utilisation is measured against.
  cfg.link_peak_bytes_per_second =
      measure_copy_bandwidth(*dev, copy_direction::host_to_device, sim ? (16u << 20) : (256u << 20), 3);

  const std::uint64_t model_bytes = streamed_weight_bytes(cfg);
  std::printf("htp-stream-bench on %s (%s backend)\n", props.name.c_str(), to_string(props.kind));
  std::printf("  model %s: %.2fB parameters (%.2fB active per token), %d layers of %.3fB; %s\n",
              cfg.model.name.c_str(), static_cast<double>(total_parameters(cfg.model)) / 1e9,
              static_cast<double>(active_parameters_per_token(cfg.model)) / 1e9, cfg.model.layers,
              static_cast<double>(layer_parameters(cfg.model)) / 1e9, to_string(cfg.type));
  if (cfg.layers < cfg.model.layers) {
    std::printf("  running %d of %d layers with the real layer shape (--layers); embeddings not paged\n",
                cfg.layers, cfg.model.layers);
  }
  std::printf("  streamed weights %s, %d token(s) per step, %d timed + %d warm-up steps, KV %s\n",
              gib(static_cast<double>(model_bytes)).c_str(), cfg.tokens, cfg.steps, cfg.warmup_steps,
              cfg.kv_context_tokens > 0 ? ("from " + std::to_string(cfg.kv_context_tokens) + " tokens").c_str() : "off");
  std::printf("  link peak %.2f GB/s (calibrated), cap %s; slab %.0f MiB, page %.0f KiB, chunk %.0f MiB\n",
              static_cast<double>(cfg.link_peak_bytes_per_second) * time_scale / 1e9,
              cfg.rate_bytes_per_second ? (std::to_string(rate_gbps) + " GB/s").c_str() : "none",
              slab_mib, page_kib, chunk_mib);
  std::printf("  compute: %s\n", compute->description().c_str());
  if (sim) {
    std::printf("  sim: the link is MODELLED (%.1f GB/s, %.1f us per copy); these are not GPU numbers\n",
                model_link_gbps, model_latency_us);
  }
  if (timing_only) {
    std::printf("  sim TIMING-ONLY: no bytes are stored or moved; checksums are OFF (nothing verified), times modelled\n");
  }
  if (time_scale != 1) {
    std::printf("  sim time DILATED x%.0f: it runs %.0fx slower than modelled (the compute line shows the dilated rate)\n"
                "  and reports times / %.0f, so the simulation's own per-operation cost shrinks %.0f-fold\n",
                time_scale, time_scale, time_scale, time_scale);
  }

  const bool tty = isatty(2) != 0;
  const progress_fn progress = [&](const std::string& name, int done, int total) {
    if (!tty) return;
    std::fprintf(stderr, "\r  %-15s [%-20s] %d/%d", name.c_str(),
                 std::string(static_cast<std::size_t>(20 * done / total), '#').c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\r%60s\r", "");
  };

  // The weights are pinned, filled and summed once; every policy's pager borrows them.
  std::unique_ptr<host_weights> weights;
  try {
    if (!node_only) weights = std::make_unique<host_weights>(*dev, cfg);
  } catch (const std::exception& e) {  // the host cannot pin the weights: say so, exit 2
    std::fprintf(stderr, "htp-stream-bench: pinning the weights of %d layers: %s\n", layers, e.what());
    return 2;
  }
  nlohmann::json sweep_json = nlohmann::json::array();
  std::vector<policy_result> last;
  int exit_code = 0;
  for (std::size_t bi = 0; bi < budgets.size(); ++bi) {
    cfg.hbm_budget_bytes = budgets[bi];
    std::printf("\nHBM budget %s (%.0f%% of the streamed weights)\n", gib(static_cast<double>(budgets[bi])).c_str(),
                100.0 * static_cast<double>(budgets[bi]) / static_cast<double>(model_bytes));
    std::vector<policy_result> results;
    for (const auto& pol : pols) {
      if (node_only) break;
      if (pol.all_resident && bi > 0) continue;  // independent of the budget: run once
      const std::string tp = (!trace_path.empty() && pol.name == trace_policy && bi + 1 == budgets.size()) ? trace_path : "";
      try {
        results.push_back(run_policy(*dev, cfg, pol, *compute, *weights, tp, progress));
        undilate(results.back(), time_scale);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "htp-stream-bench: policy %s failed: %s\n", pol.name.c_str(), e.what());
        policy_result r;
        r.name = pol.name;
        r.skipped = true;
        r.skip_reason = e.what();
        results.push_back(r);
        exit_code = 1;
      }
      if (results.back().mismatches != 0) {
        std::fprintf(stderr, "htp-stream-bench: policy %s read %llu corrupt weight(s)\n", pol.name.c_str(),
                     static_cast<unsigned long long>(results.back().mismatches));
        exit_code = 1;
      }
    }
    if (!node_only) print_table(results, "on-demand", budget_ms);
    nlohmann::json pj = nlohmann::json::array();
    for (const auto& r : results) pj.push_back(to_json(r, speedup_over(results, r, "on-demand")));
    sweep_json.push_back({{"hbm_budget_bytes", budgets[bi]}, {"policies", pj}});
    if (gpus > 0) {
      {
        node_options no;
        no.gpus = gpus;
        no.kind = props.kind;
        no.sim_link_gbps = sim_link_gbps;
        no.sim_latency_us = sim_latency_us;
        no.compute_gbps = sim_compute_gbps;
        no.interconnect_gbps = interconnect_gbps;
        no.fail_gpu = fail_gpu;
        no.fail_at_step = fail_at_step;
        no.shared_link_gbps = shared_link_gbps;
        no.timing_only = timing_only;
        no.time_scale = time_scale;
        no.resident = resident;
        no.host_budget_bytes = host_budget.empty() ? 0 : parse_budget(host_budget, model_bytes);
        // The modes asked for, then tensor-parallel again with HBM forced short when asked.
        struct node_run {
          node_mode mode;
          std::size_t squeeze_leave_bytes;
        };
        std::vector<node_run> runs;
        const auto asked = [&](node_mode m) {
          return ("," + node_modes + ",").find(std::string(",") + to_string(m) + ",") != std::string::npos;
        };
        for (node_mode m : {node_mode::data_parallel, node_mode::tensor_parallel, node_mode::swap_and_shard}) {
          if (asked(m)) runs.push_back({m, 0});
        }
        if (squeeze_mib > 0 && asked(node_mode::tensor_parallel)) {
          runs.push_back({node_mode::tensor_parallel, static_cast<std::size_t>(squeeze_mib * 1048576.0)});
        }
        // Every degraded acquire is a pager warning; the HBM-short run counts them instead.
        struct quieter {
          log_level was = get_log_level();
          quieter() { set_log_level(std::max(was, log_level::error)); }
          ~quieter() { set_log_level(was); }
        };
        std::vector<node_result> nrs;
        for (const node_run& run : runs) {
          const std::string label = std::string(to_string(run.mode)) + (run.squeeze_leave_bytes ? " with HBM short" : "");
          no.squeeze_leave_bytes = run.squeeze_leave_bytes;
          try {
            std::optional<quieter> q;
            if (run.squeeze_leave_bytes) q.emplace();
            nrs.push_back(run_node_mode(cfg, run.mode, no));
          } catch (const std::exception& e) {
            std::fprintf(stderr, "htp-stream-bench: %s on %zu GPUs failed: %s\n", label.c_str(), gpus, e.what());
            exit_code = 1;
            continue;
          }
          if (nrs.back().mismatches != 0) {
            std::fprintf(stderr, "htp-stream-bench: %s read %llu corrupt weight(s)\n", label.c_str(),
                         static_cast<unsigned long long>(nrs.back().mismatches));
            exit_code = 1;
          }
        }
        print_node_table(nrs, budget_ms, tail_budget_ms);
        nlohmann::json nj = nlohmann::json::array();
        for (const auto& r : nrs) nj.push_back(to_json(r));
        sweep_json.back()["node"] = nj;
      }
    }
    last = std::move(results);
  }

  if (!json_path.empty()) {
    nlohmann::json j;
    j["benchmark"] = "htp-stream-bench";
    j["device"] = {{"name", props.name}, {"backend", to_string(props.kind)}, {"total_memory", props.total_memory}};
    j["model"] = {{"name", cfg.model.name}, {"dtype", to_string(cfg.type)},
                  {"parameters", total_parameters(cfg.model)}, {"active_parameters", active_parameters_per_token(cfg.model)},
                  {"layer_parameters", layer_parameters(cfg.model)}, {"layers", cfg.model.layers},
                  {"layers_run", cfg.layers}, {"streamed_weight_bytes", model_bytes}};
    j["config"] = {{"tokens", cfg.tokens}, {"steps", cfg.steps}, {"warmup_steps", cfg.warmup_steps},
                   {"slab_bytes", cfg.slab_bytes}, {"page_bytes", cfg.page_bytes}, {"chunk_bytes", cfg.chunk_bytes},
                   {"rate_cap_bytes_per_second", cfg.rate_bytes_per_second.value_or(0)},
                   {"link_peak_bytes_per_second", static_cast<std::uint64_t>(static_cast<double>(cfg.link_peak_bytes_per_second) * time_scale)},
                   {"kv_context_tokens", cfg.kv_context_tokens}, {"kv_block_tokens", cfg.kv_block_tokens},
                   {"latency_budget_ms", budget_ms}, {"compute", compute->description()}, {"seed", seed}};
    if (sim) {
      j["sim"] = {{"link_gbps", model_link_gbps}, {"latency_us", model_latency_us}, {"compute", sim_compute},
                  {"compute_gbps", model_compute_gbps}, {"timing_only", timing_only}, {"time_scale", time_scale},
                  {"checksums", timing_only ? "off (timing-only: no bytes stored)" : "on"}};
    }
    if (case_study) j["preset"] = "case-study";
    j["policies"] = sweep_json.back()["policies"];
    if (sweep_json.back().contains("node")) j["node"] = sweep_json.back()["node"];
    j["sweep"] = sweep_json;
    for (const auto& r : last) {
      if (r.name == trace_policy && !r.skipped) {
        j["measured"] = {{"policy", r.name}, {"h2d_gbps", r.h2d_gbps}, {"step_ms_p50", r.step.p50}, {"step_ms_p99", r.step.p99},
                         {"hbm_budget_bytes", r.hbm_budget_bytes}};
      }
    }
    if (!trace_path.empty()) j["trace"] = trace_path;
    std::ofstream(json_path) << j.dump(2) << "\n";
    std::printf("\nwrote %s\n", json_path.c_str());
  }
  if (!trace_path.empty()) std::printf("wrote %s (policy %s)\n", trace_path.c_str(), trace_policy.c_str());
  return exit_code;
}
