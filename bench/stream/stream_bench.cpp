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
#include "node_report.hpp"
#include "options.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "shared/model_shapes.hpp"
#include "static_runner.hpp"
#include "train_runner.hpp"
#include "zero2_runner.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

namespace {

using namespace htp;
using namespace htp::bench;

/// "0.5" = that fraction of the streamed weights; "8GiB", "512MiB", "3GB" = bytes.
std::size_t parse_budget(const std::string& s, std::uint64_t model_bytes) {
  std::size_t pos = 0;
  const double v = std::stod(s, &pos);
  const std::string unit = s.substr(pos);
  if (unit.empty()) {
    if (v <= 0 || v > 64)
      throw invalid_argument("--hbm-budget " + s + ": a fraction must be in (0, 64]");
    return static_cast<std::size_t>(v * static_cast<double>(model_bytes));
  }
  const double mult = unit == "GiB"   ? 1073741824.0
                      : unit == "MiB" ? 1048576.0
                      : unit == "GB"  ? 1e9
                      : unit == "MB"  ? 1e6
                                      : 0;
  if (mult == 0)
    throw invalid_argument("--hbm-budget " + s +
                           ": unit must be GiB, MiB, GB or MB (or none for a fraction)");
  return static_cast<std::size_t>(v * mult);
}

/// Bytes as "1.23 GiB".
std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / 1073741824.0);
  return b;
}

/// The host's RAM as the OS reports it (MemTotal); 0 when unknown.
std::uint64_t host_ram_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0
             ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
             : 0;
}

/// What the run is set up with: the model and step configuration, the device and its compute,
/// the policies and the HBM budgets, and the rates as modelled (before --sim-time-scale's
/// dilation).
struct run_setup {
  bench_config cfg;
  std::unique_ptr<device> dev;
  std::unique_ptr<layer_compute> compute;
  std::vector<policy> pols;
  std::vector<std::size_t> budgets;
  double model_link_gbps = 0, model_latency_us = 0, model_compute_gbps = 0;  // before dilation
};

/// Checks the options that depend on the backend, then dilates the sim's rates in `o` by
/// --sim-time-scale (every modelled rate S times slower, the per-copy latency S times longer),
/// filling in the defaults that follow the link, and keeps the undilated ones in `s`.
/// @throws htp::invalid_argument for a combination that cannot run.
void check_and_dilate(stream_options& o, bool want_sim, run_setup& s) {
  device_options& d = o.device;
  if (d.sim_timing_only && !want_sim)
    throw invalid_argument("--timing-only is a sim mode; add --backend sim");
  if (d.sim_timing_only && o.sim_compute != "modelled")
    throw invalid_argument("--timing-only needs --sim-compute modelled (no bytes to checksum)");
  if (o.node_only && o.gpus == 0) throw invalid_argument("--node-only needs --gpus N");
  if (o.train && (!want_sim || !d.sim_timing_only))
    throw invalid_argument("--train runs on the timing-only sim: add --backend sim --timing-only");
  if (!(o.time_scale >= 1)) throw invalid_argument("--sim-time-scale must be at least 1");
  if (o.time_scale != 1 && !want_sim)
    throw invalid_argument("--sim-time-scale needs --backend sim");
  s.model_link_gbps = d.sim_link_gbps;
  s.model_latency_us = d.sim_latency_us;
  if (want_sim) {
    d.sim_link_gbps /= o.time_scale;
    d.sim_latency_us *= o.time_scale;
    if (o.sim_compute_gbps <= 0)
      o.sim_compute_gbps = s.model_link_gbps * 4800.0 / 55.0;  // an H200 over its PCIe
    o.sim_compute_gbps /= o.time_scale;
    if (o.interconnect_gbps <= 0)
      o.interconnect_gbps = s.model_link_gbps * 450.0 / 55.0;  // NVLink 4 over PCIe
    o.interconnect_gbps /= o.time_scale;
    o.shared_link_gbps /= o.time_scale;
  }
  s.model_compute_gbps = o.sim_compute_gbps * o.time_scale;
}

/// The step configuration from the options (cfg.model and cfg.type already set): the layers run
/// (all on a GPU, up to 8 on sim unless timing-only), tokens, steps, slab, page and chunk sizes.
/// @throws htp::invalid_argument for more layers than the model has, or no tokens or steps.
void configure_steps(stream_options& o, bool want_sim, bench_config& cfg) {
  if (o.layers <= 0)
    o.layers =
        want_sim && !o.device.sim_timing_only ? std::min(8, cfg.model.layers) : cfg.model.layers;
  if (o.layers > cfg.model.layers) {
    throw invalid_argument("--layers " + std::to_string(o.layers) + ": " + cfg.model.name +
                           " has " + std::to_string(cfg.model.layers));
  }
  if (o.tokens < 1 || o.steps < 1 || o.warmup < 0)
    throw invalid_argument("--tokens and --steps must be >= 1, --warmup >= 0");
  cfg.layers = o.layers;
  cfg.tokens = o.tokens;
  cfg.steps = o.steps;
  cfg.warmup_steps = o.warmup;
  cfg.slab_bytes = static_cast<std::size_t>(o.slab_mib * 1048576.0);
  cfg.page_bytes = static_cast<std::size_t>(o.page_kib * 1024.0);
  cfg.chunk_bytes = static_cast<std::size_t>(o.chunk_mib * 1048576.0);
  cfg.kv_context_tokens = o.kv_context;
  cfg.kv_block_tokens = o.kv_block;
  cfg.latency_budget = std::chrono::milliseconds(static_cast<long>(o.budget_ms));
  cfg.seed = o.seed;
  cfg.synthetic_weights = o.compress;
  cfg.modelled_compression_ratio = o.compress_ratio;
  // A cap is a rate: dilated with the sim's modelled link (time_scale is 1 on cuda).
  if (o.rate_gbps > 0)
    cfg.rate_bytes_per_second = static_cast<std::uint64_t>(o.rate_gbps * 1e9 / o.time_scale);
}

/// The HBM budgets to run: --hbm-budget, or each of --sweep's. @throws htp::invalid_argument for
/// a malformed budget or one smaller than a layer's working set plus two slabs.
std::vector<std::size_t> budgets_of(const stream_options& o, const bench_config& cfg) {
  const std::uint64_t model_bytes = streamed_weight_bytes(cfg);
  const std::uint64_t layer_bytes = largest_layer_bytes(cfg);
  std::vector<std::string> asked{o.budget};
  if (!o.sweep.empty()) {
    asked.clear();
    std::stringstream ss(o.sweep);
    for (std::string x; std::getline(ss, x, ',');) asked.push_back(x);
  }
  std::vector<std::size_t> budgets;
  for (const auto& s : asked) {
    const std::size_t b = parse_budget(s, model_bytes);
    if (b < layer_bytes + 2 * cfg.slab_bytes) {
      throw invalid_argument("HBM budget " + gib(static_cast<double>(b)) +
                             " is smaller than one layer's working set (" +
                             gib(static_cast<double>(layer_bytes)) +
                             " plus two slabs of headroom); give at least " +
                             gib(static_cast<double>(layer_bytes + 2 * cfg.slab_bytes)));
    }
    budgets.push_back(b);
  }
  return budgets;
}

/// The device and its compute: a sim device with room for the largest budget (or 1.5x the
/// weights), twice the KV cache and 1 GiB, over the (dilated) modelled link; or the first GPU.
void make_device_and_compute(const stream_options& o, bool want_sim, run_setup& s) {
  device_options d = o.device;
  d.backend = want_sim ? "sim" : "cuda";
  const std::uint64_t model_bytes = streamed_weight_bytes(s.cfg);
  d.sim_memory_bytes = std::max<std::size_t>(*std::max_element(s.budgets.begin(), s.budgets.end()),
                                             static_cast<std::size_t>(model_bytes * 3 / 2)) +
                       static_cast<std::size_t>(kv_bytes_at_end(s.cfg) * 2) +
                       (std::size_t{1} << 30);
  s.dev = make_bench_device(d);
  s.compute = want_sim ? make_sim_compute(*s.dev, o.sim_compute, o.sim_compute_gbps)
                       : make_cuda_compute(*s.dev, s.cfg.type, o.tokens, s.cfg.model);
}

/// Sets the run up from the options (dilating the sim's rates in `o`). @throws
/// htp::invalid_argument for options that cannot run, and what making the device throws.
run_setup set_up(stream_options& o) {
  run_setup s;
  bench_config& cfg = s.cfg;
  const auto is_json = [](const std::string& n) {
    return n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0;
  };
  cfg.model = !o.config_path.empty()  ? from_hf_config(o.config_path)
              : is_json(o.model_name) ? from_hf_config(o.model_name)
                                      : preset(o.model_name);
  cfg.type = parse_dtype(o.dtype_name);
  const bool want_sim = wants_sim(o.device.backend);
  check_and_dilate(o, want_sim, s);
  configure_steps(o, want_sim, cfg);
  s.budgets = budgets_of(o, cfg);
  // A note, not a refusal: a microVM's MemTotal can read far below the RAM it can use (it grows
  // as the guest touches memory). A host that really cannot pin the weights fails at the pin,
  // with out_of_memory naming the host's free memory.
  const std::uint64_t model_bytes = streamed_weight_bytes(cfg);
  const std::uint64_t ram = host_ram_bytes();
  if (ram != 0 && !o.device.sim_timing_only && model_bytes + kv_bytes_at_end(cfg) > ram * 7 / 10) {
    std::fprintf(
        stderr,
        "htp-stream-bench: note: %d layers (%s) are more than 70%% of the %s MemTotal reports; "
        "pinning them may fail (then use fewer --layers)\n",
        o.layers, gib(static_cast<double>(model_bytes)).c_str(),
        gib(static_cast<double>(ram)).c_str());
  }
  make_device_and_compute(o, want_sim, s);
  for (const auto& p : standard_policies()) {
    if (o.policies == "all" ||
        ("," + o.policies + ",").find("," + p.name + ",") != std::string::npos)
      s.pols.push_back(p);
  }
  if (s.pols.empty()) throw invalid_argument("--policies " + o.policies + " names no known policy");
  return s;
}

/// What the run's compute is: the layer compute's own line, or --train's modelled FLOPs.
std::string compute_description(const stream_options& o, const run_setup& s) {
  if (!o.train) return s.compute->description();
  char b[200];
  std::snprintf(b, sizeof b,
                "--train: modelled FLOPs per module, forward 2 x params x tokens, backward 2 x "
                "forward, at %.0f TFLOPS; %d x %d tokens per step",
                o.train_tflops, o.batch, o.seq_len);
  return b;
}

/// The run's header: the device, the model, the steps, the link and the compute, and what on sim
/// is modelled, timing-only or dilated.
void print_header(const stream_options& o, const run_setup& s) {
  const bench_config& cfg = s.cfg;
  const auto& props = s.dev->properties();
  const std::uint64_t model_bytes = streamed_weight_bytes(cfg);
  std::printf("htp-stream-bench on %s (%s backend)\n", props.name.c_str(), to_string(props.kind));
  std::printf("  model %s: %.2fB parameters (%.2fB active per token), %d layers of %.3fB; %s\n",
              cfg.model.name.c_str(), static_cast<double>(total_parameters(cfg.model)) / 1e9,
              static_cast<double>(active_parameters_per_token(cfg.model)) / 1e9, cfg.model.layers,
              static_cast<double>(layer_parameters(cfg.model)) / 1e9, to_string(cfg.type));
  if (cfg.layers < cfg.model.layers) {
    std::printf(
        "  running %d of %d layers with the real layer shape (--layers); embeddings not paged\n",
        cfg.layers, cfg.model.layers);
  }
  std::printf("  streamed weights %s, %d token(s) per step, %d timed + %d warm-up steps, KV %s\n",
              gib(static_cast<double>(model_bytes)).c_str(), cfg.tokens, cfg.steps,
              cfg.warmup_steps,
              cfg.kv_context_tokens > 0
                  ? ("from " + std::to_string(cfg.kv_context_tokens) + " tokens").c_str()
                  : "off");
  std::printf(
      "  link peak %.2f GB/s (calibrated), cap %s; slab %.0f MiB, page %.0f KiB, chunk %.0f MiB\n",
      static_cast<double>(cfg.link_peak_bytes_per_second) * o.time_scale / 1e9,
      cfg.rate_bytes_per_second ? (std::to_string(o.rate_gbps) + " GB/s").c_str() : "none",
      o.slab_mib, o.page_kib, o.chunk_mib);
  std::printf("  compute: %s\n", compute_description(o, s).c_str());
  if (props.kind == backend::sim) {
    std::printf(
        "  sim: the link is MODELLED (%.1f GB/s, %.1f us per copy); these are not GPU numbers\n",
        s.model_link_gbps, s.model_latency_us);
  }
  if (o.device.sim_timing_only) {
    std::printf("  sim TIMING-ONLY: no bytes are stored or moved; checksums are OFF (nothing "
                "verified), times modelled\n");
  }
  if (o.time_scale != 1) {
    std::printf("  sim time DILATED x%.0f: it runs %.0fx slower than modelled (the compute line "
                "shows the dilated rate)\n"
                "  and reports times / %.0f, so the simulation's own per-operation cost shrinks "
                "%.0f-fold\n",
                o.time_scale, o.time_scale, o.time_scale, o.time_scale);
  }
}

/// --static: each static scheme at s.cfg's budget, appended to `results` (a failure kept as
/// skipped, and exit code 1).
void run_static_schemes(const stream_options& o, run_setup& s, const host_weights& weights,
                        const progress_fn& progress, std::vector<policy_result>& results,
                        int& exit_code) {
  for (const auto& scheme : static_schemes()) {
    s.cfg.compress = scheme.compressed;
    try {
      results.push_back(run_static(*s.dev, s.cfg, scheme, *s.compute, weights, progress));
      undilate(results.back(), o.time_scale);
    } catch (const std::exception& e) {
      // A baseline that does not fit the budget is skipped, said why; anything else fails.
      const bool no_room = scheme.round_robin_k != 0 && dynamic_cast<const out_of_memory*>(&e);
      std::fprintf(stderr, "htp-stream-bench: static scheme %s %s: %s\n", scheme.name.c_str(),
                   no_room ? "skipped" : "failed", e.what());
      policy_result r;
      r.name = scheme.name;
      r.lookahead = "static";
      r.skipped = true;
      r.skip_reason = e.what();
      results.push_back(r);
      if (!no_room) exit_code = 1;
    }
    if (results.back().mismatches != 0) {
      std::fprintf(stderr, "htp-stream-bench: static scheme %s read %llu corrupt weight(s)\n",
                   scheme.name.c_str(), static_cast<unsigned long long>(results.back().mismatches));
      exit_code = 1;
    }
  }
  s.cfg.compress = false;
}

/// The single-GPU policies at budget `bi` (all-resident only at the first, which it does not
/// depend on); the last budget's --trace-policy traced. A failed policy is kept as skipped, and a
/// failure or a corrupt read sets `exit_code` to 1.
std::vector<policy_result> run_policies(const stream_options& o, run_setup& s, std::size_t bi,
                                        const host_weights& weights, const progress_fn& progress,
                                        int& exit_code) {
  std::vector<policy_result> results;
  std::vector<std::pair<const policy*, bool>> runs;  // --compress: each policy raw, then compressed
  for (const auto& pol : s.pols) {
    runs.emplace_back(&pol, false);
    if (o.compress) runs.emplace_back(&pol, true);
  }
  for (const auto& [pp, z] : runs) {
    const policy& pol = *pp;
    if (pol.all_resident && bi > 0) continue;  // independent of the budget: run once
    const bool traced =
        !o.trace_path.empty() && pol.name == o.trace_policy && bi + 1 == s.budgets.size() && !z;
    s.cfg.compress = z;
    try {
      results.push_back(run_policy(*s.dev, s.cfg, pol, *s.compute, weights,
                                   traced ? o.trace_path : "", progress));
      undilate(results.back(), o.time_scale);
      if (z) results.back().name += "+z";
    } catch (const std::exception& e) {
      std::fprintf(stderr, "htp-stream-bench: policy %s failed: %s\n", pol.name.c_str(), e.what());
      policy_result r;
      r.name = pol.name + (z ? "+z" : "");
      r.skipped = true;
      r.skip_reason = e.what();
      results.push_back(r);
      exit_code = 1;
    }
    if (results.back().mismatches != 0) {
      std::fprintf(stderr, "htp-stream-bench: policy %s read %llu corrupt weight(s)\n",
                   pol.name.c_str(), static_cast<unsigned long long>(results.back().mismatches));
      exit_code = 1;
    }
  }
  if (o.static_plans) run_static_schemes(o, s, weights, progress, results, exit_code);
  return results;
}

/// The node run's options from the command line and the device's backend (rates already dilated).
node_options node_options_of(const stream_options& o, backend kind, std::uint64_t model_bytes) {
  node_options no;
  no.gpus = o.gpus;
  no.kind = kind;
  no.sim_link_gbps = o.device.sim_link_gbps;
  no.sim_latency_us = o.device.sim_latency_us;
  no.compute_gbps = o.sim_compute_gbps;
  no.interconnect_gbps = o.interconnect_gbps;
  no.fail_gpu = o.fail_gpu;
  no.fail_at_step = o.fail_at_step;
  no.shared_link_gbps = o.shared_link_gbps;
  no.timing_only = o.device.sim_timing_only;
  no.time_scale = o.time_scale;
  no.resident = o.resident;
  no.host_budget_bytes = o.host_budget.empty() ? 0 : parse_budget(o.host_budget, model_bytes);
  return no;
}

/// One node run: a mode, and the bytes HBM forced short leaves to paged tensors (0: not squeezed).
struct node_run {
  node_mode mode;
  std::size_t squeeze_leave_bytes;
};

/// The node runs asked for: the --node-modes in order, then tensor-parallel again with HBM forced
/// short when --hbm-squeeze-mib asks for it.
std::vector<node_run> node_runs_of(const stream_options& o) {
  std::vector<node_run> runs;
  const auto asked = [&](node_mode m) {
    return ("," + o.node_modes + ",").find(std::string(",") + to_string(m) + ",") !=
           std::string::npos;
  };
  for (node_mode m :
       {node_mode::data_parallel, node_mode::tensor_parallel, node_mode::swap_and_shard}) {
    if (asked(m)) runs.push_back({m, 0});
  }
  if (o.squeeze_mib > 0 && asked(node_mode::tensor_parallel)) {
    runs.push_back(
        {node_mode::tensor_parallel, static_cast<std::size_t>(o.squeeze_mib * 1048576.0)});
  }
  return runs;
}

/// The node modes at the current budget (s.cfg.hbm_budget_bytes), their table printed; returns
/// their JSON. A failed mode is left out, and it or a corrupt read sets `exit_code` to 1.
nlohmann::json run_node_modes(const stream_options& o, const run_setup& s, int& exit_code) {
  node_options no = node_options_of(o, s.dev->properties().kind, streamed_weight_bytes(s.cfg));
  // Every degraded acquire is a pager warning; the HBM-short run counts them instead.
  struct quieter {
    log_level was = get_log_level();
    quieter() { set_log_level(std::max(was, log_level::error)); }
    ~quieter() { set_log_level(was); }
  };
  std::vector<node_result> nrs;
  bench_config cfg = s.cfg;
  cfg.compress = o.compress;  // tensor-parallel's paged shards stored compressed
  for (const node_run& run : node_runs_of(o)) {
    const std::string label =
        std::string(to_string(run.mode)) + (run.squeeze_leave_bytes ? " with HBM short" : "");
    no.squeeze_leave_bytes = run.squeeze_leave_bytes;
    try {
      std::optional<quieter> q;
      if (run.squeeze_leave_bytes) q.emplace();
      nrs.push_back(run_node_mode(cfg, run.mode, no));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "htp-stream-bench: %s on %zu GPUs failed: %s\n", label.c_str(), o.gpus,
                   e.what());
      exit_code = 1;
      continue;
    }
    if (nrs.back().mismatches != 0) {
      std::fprintf(stderr, "htp-stream-bench: %s read %llu corrupt weight(s)\n", label.c_str(),
                   static_cast<unsigned long long>(nrs.back().mismatches));
      exit_code = 1;
    }
  }
  print_node_table(nrs, o.budget_ms, o.tail_budget_ms);
  nlohmann::json nj = nlohmann::json::array();
  for (const auto& r : nrs) nj.push_back(to_json(r));
  return nj;
}

/// The run's JSON: the device, the model, the configuration, the sim's model, the last budget's
/// policies (and node modes), every budget of the sweep, and the traced policy's measurements.
nlohmann::json run_json(const stream_options& o, const run_setup& s,
                        const nlohmann::json& sweep_json, const std::vector<policy_result>& last) {
  const bench_config& cfg = s.cfg;
  const auto& props = s.dev->properties();
  nlohmann::json j;
  j["benchmark"] = "htp-stream-bench";
  j["device"] = {{"name", props.name},
                 {"backend", to_string(props.kind)},
                 {"total_memory", props.total_memory}};
  j["model"] = {{"name", cfg.model.name},
                {"dtype", to_string(cfg.type)},
                {"parameters", total_parameters(cfg.model)},
                {"active_parameters", active_parameters_per_token(cfg.model)},
                {"layer_parameters", layer_parameters(cfg.model)},
                {"layers", cfg.model.layers},
                {"layers_run", cfg.layers},
                {"streamed_weight_bytes", streamed_weight_bytes(cfg)}};
  j["config"] = {{"tokens", cfg.tokens},
                 {"steps", cfg.steps},
                 {"warmup_steps", cfg.warmup_steps},
                 {"slab_bytes", cfg.slab_bytes},
                 {"page_bytes", cfg.page_bytes},
                 {"chunk_bytes", cfg.chunk_bytes},
                 {"rate_cap_bytes_per_second", cfg.rate_bytes_per_second.value_or(0)},
                 {"link_peak_bytes_per_second",
                  static_cast<std::uint64_t>(static_cast<double>(cfg.link_peak_bytes_per_second) *
                                             o.time_scale)},
                 {"kv_context_tokens", cfg.kv_context_tokens},
                 {"kv_block_tokens", cfg.kv_block_tokens},
                 {"latency_budget_ms", o.budget_ms},
                 {"compute", compute_description(o, s)},
                 {"seed", o.seed}};
  if (props.kind == backend::sim) {
    const bool timing_only = o.device.sim_timing_only;
    j["sim"] = {{"link_gbps", s.model_link_gbps},
                {"latency_us", s.model_latency_us},
                {"compute", o.sim_compute},
                {"compute_gbps", s.model_compute_gbps},
                {"timing_only", timing_only},
                {"time_scale", o.time_scale},
                {"checksums", timing_only ? "off (timing-only: no bytes stored)" : "on"}};
  }
  if (o.case_study) j["preset"] = "case-study";
  if (sweep_json.empty()) return j;  // --train: its own section
  j["policies"] = sweep_json.back()["policies"];
  if (sweep_json.back().contains("node")) j["node"] = sweep_json.back()["node"];
  j["sweep"] = sweep_json;
  for (const auto& r : last) {
    if (r.name == o.trace_policy && !r.skipped) {
      j["measured"] = {{"policy", r.name},
                       {"h2d_gbps", r.h2d_gbps},
                       {"step_ms_p50", r.step.p50},
                       {"step_ms_p99", r.step.p99},
                       {"hbm_budget_bytes", r.hbm_budget_bytes}};
    }
  }
  if (!o.trace_path.empty()) j["trace"] = o.trace_path;
  return j;
}

/// A progress bar on stderr while it is a terminal; nothing otherwise.
progress_fn progress_bar() {
  const bool tty = isatty(2) != 0;
  return [tty](const std::string& name, int done, int total) {
    if (!tty) return;
    std::fprintf(stderr, "\r  %-15s [%-20s] %d/%d", name.c_str(),
                 std::string(static_cast<std::size_t>(20 * done / total), '#').c_str(), done,
                 total);
    if (done == total) std::fprintf(stderr, "\r%60s\r", "");
  };
}

/// Every budget in turn, at each granularity asked for: the single-GPU policies (unless
/// --node-only), their table, then the node modes when --gpus is given. Returns each (budget,
/// granularity)'s JSON; `last` gets the last one's policies.
nlohmann::json run_budgets(const stream_options& o, run_setup& s, const host_weights* weights,
                           std::vector<policy_result>& last, int& exit_code) {
  const std::uint64_t model_bytes = streamed_weight_bytes(s.cfg);
  const progress_fn progress = progress_bar();
  const std::vector<bool> granularities = granularities_of(o);
  nlohmann::json sweep_json = nlohmann::json::array();
  for (std::size_t bi = 0; bi < s.budgets.size(); ++bi) {
    s.cfg.hbm_budget_bytes = s.budgets[bi];
    const double fraction = static_cast<double>(s.budgets[bi]) / static_cast<double>(model_bytes);
    for (const bool lists : granularities) {
      s.cfg.layer_lists = lists;
      std::printf("\n%s: HBM budget %s (%.0f%% of the streamed weights), %s granularity\n",
                  s.cfg.model.name.c_str(), gib(static_cast<double>(s.budgets[bi])).c_str(),
                  100.0 * fraction, granularity_of(s.cfg));
      std::vector<policy_result> results;
      if (!o.node_only) {
        results = run_policies(o, s, bi, *weights, progress, exit_code);
        print_table(results, "on-demand", o.budget_ms);
        if (o.compress) print_compression_table(results);
        if (o.static_plans) print_static_table(results);
      }
      nlohmann::json pj = nlohmann::json::array();
      for (const auto& r : results) pj.push_back(to_json(r, speedup_over(results, r, "on-demand")));
      sweep_json.push_back({{"hbm_budget_bytes", s.budgets[bi]},
                            {"budget_fraction", fraction},
                            {"granularity", granularity_of(s.cfg)},
                            {"policies", pj}});
      if (o.gpus > 0 && lists == granularities.front())
        sweep_json.back()["node"] = run_node_modes(o, s, exit_code);
      last = std::move(results);
    }
  }
  return sweep_json;
}

/// --train's settings from the options (rates already dilated by --sim-time-scale).
train_options train_options_of(const stream_options& o) {
  train_options to;
  to.batch = o.batch;
  to.seq_len = o.seq_len;
  to.flops_per_second = o.train_tflops * 1e12 / o.time_scale;
  to.gpus = std::max<std::size_t>(1, o.gpus);
  to.link_gbps = o.device.sim_link_gbps;
  to.latency_us = o.device.sim_latency_us;
  to.interconnect_gbps = o.interconnect_gbps;
  to.time_scale = o.time_scale;
  to.page_activations = o.page_activations;
  return to;
}

/// --train: the training step at every budget, its table printed; returns the JSON's "train"
/// section. A failed budget is kept as skipped and sets `exit_code` to 1.
nlohmann::json run_train_budgets(const stream_options& o, run_setup& s, int& exit_code) {
  const train_options to = train_options_of(o);
  const double model_bytes = static_cast<double>(streamed_weight_bytes(s.cfg));
  std::vector<train_result> results;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::size_t b : s.budgets) {
    s.cfg.hbm_budget_bytes = b;
    std::printf("\n%s --train: HBM budget %s (%.0f%% of the weights) per GPU, %zu GPU(s)\n",
                s.cfg.model.name.c_str(), gib(static_cast<double>(b)).c_str(),
                100.0 * static_cast<double>(b) / model_bytes, to.gpus);
    try {
      results.push_back(run_train(s.cfg, to));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "htp-stream-bench: --train at %s failed: %s\n",
                   gib(static_cast<double>(b)).c_str(), e.what());
      train_result r;
      r.hbm_budget_bytes = b;
      r.skipped = true;
      r.skip_reason = e.what();
      results.push_back(r);
      exit_code = 1;
    }
    rows.push_back(to_json(results.back(), static_cast<double>(b) / model_bytes));
  }
  print_train_table(results);
  const std::size_t per_layer =
      static_cast<std::size_t>(o.batch) * static_cast<std::size_t>(o.seq_len) *
      static_cast<std::size_t>(s.cfg.model.hidden) * bytes_per_element(s.cfg.type);
  return {{"batch", o.batch},
          {"seq_len", o.seq_len},
          {"tokens_per_step", o.batch * o.seq_len},
          {"gpus", to.gpus},
          {"granularity", "module"},
          {"step", "forward over every layer's weights, then backward in reverse; each weight "
                   "acquired twice; set as the pager's cyclic schedule"},
          {"policy", "schedule-auto (Belady eviction on the schedule, automatic lookahead)"},
          {"compute", "modelled FLOPs: forward 2 x params x tokens, backward 2 x forward, at "
                      "train_tflops (attention scores and the optimizer not modelled)"},
          {"train_tflops", o.train_tflops},
          {"activations", o.page_activations ? "paged (tensor_kind::activation, one per layer)"
                                             : "resident, reserved"},
          {"activation_bytes_per_layer", per_layer},
          {"gradients", "a layer's buffer outside the budget, all-reduced (bf16 elements of the "
                        "layer's weight bytes) on each GPU's reduction stream after its backward"},
          {"reduction", to.gpus > 1 ? "sim collectives: (N - 1) / N x bytes / interconnect"
                                    : "one rank: no interconnect time"},
          {"interconnect_gbps", o.interconnect_gbps * o.time_scale},
          {"bound_link_bytes_per_second",
           static_cast<double>(s.cfg.link_peak_bytes_per_second) * o.time_scale},
          {"budgets", rows}};
}

/// --train --zero2: both variants at every budget, the table printed; returns the JSON's "zero2"
/// section. A failed run is kept as skipped and sets `exit_code` to 1.
nlohmann::json run_zero2_budgets(const stream_options& o, run_setup& s, int& exit_code) {
  zero2_options zo;
  zo.train = train_options_of(o);
  if (zo.train.interconnect_gbps <= 0)  // as the node runs default it: NVLink next to PCIe
    zo.train.interconnect_gbps = zo.train.link_gbps * 450.0 / 55.0;
  zo.hbm_gbps = (o.sim_compute_gbps > 0 ? o.sim_compute_gbps : 3350.0 / o.time_scale);
  const double model_bytes = static_cast<double>(streamed_weight_bytes(s.cfg));
  if (!o.host_budget.empty())
    zo.host_budget_bytes = parse_budget(o.host_budget, streamed_weight_bytes(s.cfg));
  std::vector<zero2_result> results;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::size_t b : s.budgets) {
    s.cfg.hbm_budget_bytes = b;
    for (const zero2_variant& v : zero2_variants()) {
      std::printf("\n%s --train --zero2 (%s): HBM budget %s per GPU, %zu GPU(s)\n",
                  s.cfg.model.name.c_str(), v.name.c_str(), gib(static_cast<double>(b)).c_str(),
                  zo.train.gpus);
      try {
        results.push_back(run_zero2(s.cfg, zo, v));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "htp-stream-bench: --zero2 %s at %s failed: %s\n", v.name.c_str(),
                     gib(static_cast<double>(b)).c_str(), e.what());
        zero2_result r;
        r.variant = v.name;
        r.hbm_budget_bytes = b;
        r.skipped = true;
        r.skip_reason = e.what();
        results.push_back(r);
        exit_code = 1;
      }
      rows.push_back(to_json(results.back()));
      rows.back()["budget_fraction"] = static_cast<double>(b) / model_bytes;
    }
  }
  print_zero2_table(results);
  return {{"batch", o.batch},
          {"seq_len", o.seq_len},
          {"gpus", zo.train.gpus},
          {"order", "forward 0..L-1, then backward L-1..0 (swap_shard_config::order)"},
          {"compute", "modelled FLOPs: forward 2 x params x tokens, backward 2 x forward, at "
                      "train_tflops; optimizer: AdamW on the shard, 28 bytes per parameter at "
                      "the modelled HBM rate"},
          {"train_tflops", o.train_tflops},
          {"hbm_gbps", zo.hbm_gbps * o.time_scale},
          {"interconnect_gbps", zo.train.interconnect_gbps * o.time_scale},
          {"reserved", "activations (as --train), gradient shards (bf16), optimizer state (12 "
                       "bytes per shard parameter), a layer's gradient"},
          {"variants", "htp: ahead 2, layers_per_sync 2; per-layer: ahead 1, layers_per_sync 1"},
          {"design_barrier_ms_per_layer", 3.4},
          {"rows", rows}};
}

/// One model's run: set up, calibrate, pin the weights once, every budget and granularity. Sets
/// `json` to the run's JSON (unset when it could not run) and returns the exit code (2: it could
/// not be set up).
int run_model(stream_options o, nlohmann::json& json) {
  run_setup s;
  try {
    s = set_up(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-stream-bench: %s\n", e.what());
    return 2;
  }
  // One calibration for all policies: the raw copy peak the utilisation is measured against.
  const bool sim = s.dev->properties().kind == backend::sim;
  s.cfg.link_peak_bytes_per_second = measure_copy_bandwidth(*s.dev, copy_direction::host_to_device,
                                                            sim ? (16u << 20) : (256u << 20), 3);
  print_header(o, s);

  // The weights are pinned, filled and summed once; every policy's pager borrows them.
  std::unique_ptr<host_weights> weights;
  try {
    if (!o.node_only && !o.train) weights = std::make_unique<host_weights>(*s.dev, s.cfg);
  } catch (const std::exception& e) {  // the host cannot pin the weights: say so, exit 2
    std::fprintf(stderr, "htp-stream-bench: pinning the weights of %d layers: %s\n", o.layers,
                 e.what());
    return 2;
  }
  std::vector<policy_result> last;
  int exit_code = 0;
  if (o.train) {
    json = run_json(o, s, nlohmann::json::array(), {});
    json[o.zero2 ? "zero2" : "train"] =
        o.zero2 ? run_zero2_budgets(o, s, exit_code) : run_train_budgets(o, s, exit_code);
    return exit_code;
  }
  const nlohmann::json sweep_json = run_budgets(o, s, weights.get(), last, exit_code);
  json = run_json(o, s, sweep_json, last);
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  stream_options o;
  if (const int rc = parse_stream_options(argc, argv, o); rc >= 0) return rc;
  std::vector<model_run> models;
  try {
    models = models_of(o);
    granularities_of(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-stream-bench: %s\n", e.what());
    return 2;
  }
  int exit_code = 0;
  nlohmann::json runs = nlohmann::json::array();
  for (const model_run& m : models) {
    stream_options mo = o;
    mo.model_name = m.name;
    if (!o.models.empty()) {
      mo.layers = m.layers;
      mo.config_path.clear();
    }
    nlohmann::json j;
    const int rc = run_model(mo, j);
    if (rc == 2) return 2;
    exit_code = std::max(exit_code, rc);
    runs.push_back(std::move(j));
  }
  const nlohmann::json bounds = bound_rows(runs);
  print_bound_table(bounds);
  if (!o.json_path.empty()) {
    nlohmann::json out = runs.size() == 1 && o.models.empty()
                             ? runs.front()
                             : nlohmann::json{{"benchmark", "htp-stream-bench"}, {"runs", runs}};
    out["bound_table"] = bounds;
    std::ofstream(o.json_path) << out.dump(2) << "\n";
    std::printf("\nwrote %s\n", o.json_path.c_str());
  }
  if (!o.trace_path.empty())
    std::printf("wrote %s (policy %s)\n", o.trace_path.c_str(), o.trace_policy.c_str());
  return exit_code;
}
