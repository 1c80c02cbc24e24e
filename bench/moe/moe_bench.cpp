// htp-moe-bench: a mixture-of-experts model's decode steps with experts chosen by a router, paged
// without a schedule for them: today's behaviour, LRU and popularity (routed groups + expect)
// side by side, each against an offline Belady oracle on the same realised accesses. See
// docs/benchmarks.md.
#include <htp/error.hpp>
#include <htp/transfer_engine.hpp>

#include "common/pager_counters.hpp"
#include "moe/options.hpp"
#include "moe/routing.hpp"
#include "moe/runner.hpp"
#include "shared/htp_layout.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

namespace {

using namespace htp;
using namespace htp::bench;

/// Everything a run is set up with.
struct moe_setup {
  moe_config cfg;
  routing_trace trace;
  std::vector<moe_policy> pols;
  std::vector<double> fractions;
  std::uint64_t model_bytes = 0, working_set_bytes = 0;
  std::unique_ptr<device> dev;
  std::unique_ptr<layer_compute> compute;
};

/// The routing trace: replayed from --trace-in, or drawn (and written to --trace-out).
routing_trace trace_of(const moe_options& o, const model_shape& m) {
  routing_trace t;
  if (!o.trace_in.empty()) {
    t = read_routing(o.trace_in);
    if (t.params.experts != m.experts || t.params.top_k != m.experts_per_token ||
        t.params.layers > m.layers)
      throw invalid_argument("--trace-in " + o.trace_in +
                             ": its experts, top-k or layers do not "
                             "match " +
                             m.name);
  } else {
    routing_params p;
    p.layers = o.layers;
    p.experts = m.experts;
    p.top_k = m.experts_per_token;
    p.tokens = o.tokens;
    p.steps = o.warmup + o.steps;
    p.zipf_s = o.zipf_s;
    p.drift_every = o.drift_every;
    p.seed = o.seed;
    t = draw_routing(p);
  }
  if (!o.trace_out.empty()) write_routing(t, o.trace_out);
  return t;
}

/// The configuration, trace, policies and budgets from the options (the device comes after).
/// @throws htp::invalid_argument for options that cannot run.
moe_setup configure(moe_options o) {
  moe_setup s;
  moe_config& cfg = s.cfg;
  cfg.model = preset(o.model_name);
  cfg.type = parse_dtype(o.dtype_name);
  if (o.layers <= 0) o.layers = cfg.model.layers;
  if (o.layers > cfg.model.layers || o.tokens < 1 || o.steps < 1 || o.warmup < 0)
    throw invalid_argument("--layers must be <= the model's, --tokens and --steps >= 1");
  s.trace = trace_of(o, cfg.model);
  cfg.layers = s.trace.params.layers;
  cfg.tokens = s.trace.params.tokens;
  cfg.warmup = o.trace_in.empty() ? o.warmup : std::min(o.warmup, s.trace.params.steps - 1);
  cfg.steps = static_cast<int>(s.trace.choice.size()) - cfg.warmup;
  cfg.slab_bytes = static_cast<std::size_t>(o.slab_mib * 1048576.0);
  cfg.page_bytes = static_cast<std::size_t>(o.page_kib * 1024.0);
  cfg.chunk_bytes = static_cast<std::size_t>(o.chunk_mib * 1048576.0);
  cfg.popularity_half_life = o.half_life;
  const moe_layout layout = layout_of(cfg);
  for (auto b : layout.bytes) s.model_bytes += b;
  const auto& l0 = layout.layers.front();
  for (std::size_t i : l0.shared) s.working_set_bytes += layout.bytes[i];
  const int k = std::min(cfg.model.experts, cfg.tokens * cfg.model.experts_per_token);
  for (std::size_t i : l0.experts.front()) s.working_set_bytes += layout.bytes[i] * k;
  std::stringstream ps(o.policies), bs(o.sweep);
  for (std::string x; std::getline(ps, x, ',');) s.pols.push_back(parse_moe_policy(x));
  for (std::string x; std::getline(bs, x, ',');) {
    const double f = std::stod(x);
    const double need = static_cast<double>(s.working_set_bytes + 2 * cfg.slab_bytes);
    if (!(f > 0) || f * static_cast<double>(s.model_bytes) < need)
      throw invalid_argument("--sweep " + x + ": below one layer's working set plus two slabs (" +
                             std::to_string(need / static_cast<double>(s.model_bytes)) + ")");
    s.fractions.push_back(f);
  }
  return s;
}

/// The device (sized for the largest budget) and its compute, the link calibrated.
void make_device(const moe_options& o, moe_setup& s) {
  device_options d = o.device;
  const double most = *std::max_element(s.fractions.begin(), s.fractions.end());
  d.sim_memory_bytes =
      static_cast<std::size_t>(most * static_cast<double>(s.model_bytes)) + (std::size_t{2} << 30);
  s.dev = make_bench_device(d);
  const bool sim = s.dev->properties().kind == backend::sim;
  const double compute_gbps =
      o.sim_compute_gbps > 0 ? o.sim_compute_gbps : o.device.sim_link_gbps * 4800.0 / 55.0;
  s.compute = sim ? make_sim_compute(*s.dev, "modelled", compute_gbps)
                  : make_cuda_compute(*s.dev, s.cfg.type, s.cfg.tokens, s.cfg.model);
  s.cfg.link_peak_bytes_per_second = measure_copy_bandwidth(*s.dev, copy_direction::host_to_device,
                                                            sim ? (16u << 20) : (256u << 20), 3);
}

/// One policy's figures as JSON, with its ratio to the oracle's bytes.
nlohmann::json to_json(const moe_result& r, std::uint64_t oracle, int steps) {
  if (r.skipped) return {{"name", r.name}, {"skipped", true}, {"reason", r.skip_reason}};
  const std::uint64_t paged = r.counters.page_in_bytes;
  nlohmann::json j{
      {"name", r.name},
      {"bytes_per_step", static_cast<double>(paged) / steps},
      {"bytes_over_oracle",
       oracle > 0 ? static_cast<double>(paged) / static_cast<double>(oracle) : 0},
      {"step_ms", {{"p50", r.step_p50_ms}, {"p99", r.step_p99_ms}}},
      {"steps_ms", r.step_ms},
      {"compute_ms_per_step", r.compute_ms},
      {"prefetch_timely_share", r.prefetch_timely_share},
      {"prefetch_lateness",
       {{"count", r.lateness_count}, {"p50_ms", r.lateness_p50_ms}, {"p99_ms", r.lateness_p99_ms}}},
      {"hbm_mean_pct", r.hbm_mean_pct},
      {"pager_metrics", nlohmann::json::parse(r.metrics_json)}};
  // The timed steps' counters, under their names in HTP_PAGER_COUNTERS.
  add_pager_counters(j, r.counters,
                     {"page_in_bytes", "page_ins", "faults", "late_prefetches", "prefetches",
                      "prefetch_hits", "wasted_prefetches", "evictions", "acquires"});
  return j;
}

/// The table of one budget: each policy's bytes against the oracle's.
void print_budget(const moe_setup& s, double fraction, std::uint64_t oracle,
                  std::uint64_t fixed_set, std::uint64_t lfu,
                  const std::vector<moe_result>& results) {
  const double steps = s.cfg.steps;
  const auto over = [&](std::uint64_t b) {
    return oracle > 0 ? static_cast<double>(b) / static_cast<double>(oracle) : 0.0;
  };
  std::printf("\nHBM budget %.2f GiB (%.0f%% of %d layers' weights); oracle (Belady on the "
              "realised trace) %.1f MB/step; best fixed set %.1f MB/step (%.3fx); LFU %.1f "
              "MB/step (%.3fx)\n",
              static_cast<double>(s.cfg.hbm_budget_bytes) / 1073741824.0, 100 * fraction,
              s.cfg.layers, static_cast<double>(oracle) / steps / 1e6,
              static_cast<double>(fixed_set) / steps / 1e6, over(fixed_set),
              static_cast<double>(lfu) / steps / 1e6, over(lfu));
  std::printf("%-11s %9s %8s %7s %8s %8s %9s %7s %9s %9s\n", "policy", "MB/step", "x oracle",
              "faults", "late", "wasted", "step p50", "timely", "late p50", "late p99");
  for (const auto& r : results) {
    if (r.skipped) {
      std::printf("%-11s skipped: %s\n", r.name.c_str(), r.skip_reason.c_str());
      continue;
    }
    const pager_metrics& c = r.counters;  // of the timed steps
    std::printf("%-11s %9.1f %8.3f %7llu %8llu %8llu %9.1f %6.1f%% %9.2f %9.2f\n", r.name.c_str(),
                static_cast<double>(c.page_in_bytes) / steps / 1e6,
                oracle > 0 ? static_cast<double>(c.page_in_bytes) / static_cast<double>(oracle) : 0,
                static_cast<unsigned long long>(c.faults),
                static_cast<unsigned long long>(c.late_prefetches),
                static_cast<unsigned long long>(c.wasted_prefetches), r.step_p50_ms,
                100 * r.prefetch_timely_share, r.lateness_p50_ms, r.lateness_p99_ms);
  }
}

/// Every budget: the policies, the oracle, the table; returns the sweep's JSON. A failed policy
/// is kept as skipped and sets `exit_code` to 1.
nlohmann::json run_sweep(moe_setup& s, int& exit_code) {
  nlohmann::json sweep = nlohmann::json::array();
  const moe_layout layout = layout_of(s.cfg);
  for (double f : s.fractions) {
    const auto budget = static_cast<std::size_t>(f * static_cast<double>(s.model_bytes));
    s.cfg.hbm_budget_bytes = budget / s.cfg.page_bytes * s.cfg.page_bytes;
    const std::uint64_t oracle = oracle_bytes(s.cfg, layout, s.trace);
    const std::uint64_t fixed_set = best_fixed_set_bytes(s.cfg, layout, s.trace);
    const std::uint64_t lfu = lfu_bytes(s.cfg, layout, s.trace);
    std::vector<moe_result> results;
    for (moe_policy pol : s.pols) {
      try {
        results.push_back(run_moe_policy(*s.dev, s.cfg, pol, *s.compute, s.trace));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "htp-moe-bench: policy %s failed: %s\n", to_string(pol), e.what());
        moe_result r;
        r.name = to_string(pol);
        r.skipped = true;
        r.skip_reason = e.what();
        results.push_back(r);
        exit_code = 1;
      }
    }
    print_budget(s, f, oracle, fixed_set, lfu, results);
    nlohmann::json pj = nlohmann::json::array();
    for (const auto& r : results) pj.push_back(to_json(r, oracle, s.cfg.steps));
    sweep.push_back(
        {{"budget_fraction", f},
         {"hbm_budget_bytes", s.cfg.hbm_budget_bytes},
         {"oracle",
          {{"page_in_bytes", oracle},
           {"bytes_per_step", static_cast<double>(oracle) / s.cfg.steps},
           {"rule", "belady-on-realised-trace"}}},
         {"best_fixed_set",
          {{"page_in_bytes", fixed_set},
           {"bytes_per_step", static_cast<double>(fixed_set) / s.cfg.steps},
           {"over_oracle",
            oracle > 0 ? static_cast<double>(fixed_set) / static_cast<double>(oracle) : 0}}},
         {"lfu",
          {{"page_in_bytes", lfu},
           {"bytes_per_step", static_cast<double>(lfu) / s.cfg.steps},
           {"over_oracle",
            oracle > 0 ? static_cast<double>(lfu) / static_cast<double>(oracle) : 0}}},
         {"policies", pj}});
  }
  return sweep;
}

/// The run's JSON: the device, the model, the routing, the configuration and the sweep.
nlohmann::json run_json(const moe_options& o, const moe_setup& s, const nlohmann::json& sweep) {
  const auto& props = s.dev->properties();
  const routing_params& rp = s.trace.params;
  return {{"benchmark", "htp-moe-bench"},
          {"device",
           {{"name", props.name},
            {"backend", to_string(props.kind)},
            {"timing_only", props.timing_only}}},
          {"model",
           {{"name", s.cfg.model.name},
            {"dtype", to_string(s.cfg.type)},
            {"experts", s.cfg.model.experts},
            {"experts_per_token", s.cfg.model.experts_per_token},
            {"layers", s.cfg.model.layers},
            {"layers_run", s.cfg.layers},
            {"weight_bytes", s.model_bytes},
            {"layer_working_set_bytes", s.working_set_bytes}}},
          {"routing",
           {{"zipf_s", rp.zipf_s},
            {"drift_every", rp.drift_every},
            {"seed", rp.seed},
            {"tokens", rp.tokens},
            {"steps", rp.steps},
            {"rank_shares", s.trace.rank_shares()},
            {"trace_in", o.trace_in},
            {"trace_out", o.trace_out}}},
          {"config",
           {{"warmup_steps", s.cfg.warmup},
            {"steps", s.cfg.steps},
            {"slab_bytes", s.cfg.slab_bytes},
            {"page_bytes", s.cfg.page_bytes},
            {"chunk_bytes", s.cfg.chunk_bytes},
            {"popularity_half_life", s.cfg.popularity_half_life},
            {"link_peak_bytes_per_second", s.cfg.link_peak_bytes_per_second},
            {"sim_link_gbps", o.device.sim_link_gbps}}},
          {"sweep", sweep}};
}

}  // namespace

int main(int argc, char** argv) {
  moe_options o;
  if (const int rc = parse_moe_options(argc, argv, o); rc >= 0) return rc;
  moe_setup s;
  try {
    s = configure(o);
    make_device(o, s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-moe-bench: %s\n", e.what());
    return 2;
  }
  const auto& props = s.dev->properties();
  std::printf(
      "htp-moe-bench on %s (%s backend): %s, %d of %d layers (%.2f GiB), %d token(s) per step, "
      "%d timed + %d warm-up steps, Zipf s = %.2f\n",
      props.name.c_str(), to_string(props.kind), s.cfg.model.name.c_str(), s.cfg.layers,
      s.cfg.model.layers, static_cast<double>(s.model_bytes) / 1073741824.0, s.cfg.tokens,
      s.cfg.steps, s.cfg.warmup, s.trace.params.zipf_s);
  int exit_code = 0;
  const nlohmann::json sweep = run_sweep(s, exit_code);
  if (!o.json_path.empty()) {
    std::ofstream(o.json_path) << run_json(o, s, sweep).dump(2) << "\n";
    std::printf("\nwrote %s\n", o.json_path.c_str());
  }
  return exit_code;
}
