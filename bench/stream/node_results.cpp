// htp-stream-bench --gpus N: a mode's result. See node_results.hpp.
#include "node_results.hpp"

#include <algorithm>
#include <chrono>
#include <string>

namespace htp::bench::node_run {

namespace {

/// HBM forced short: the most any GPU left to its paged tensors, the least block that took the
/// rest, and the acquires served from mapped host memory per step per GPU.
void squeeze_figures(const gpu_threads& run, node_result& r) {
  const std::size_t N = run.devs.size();
  r.squeeze_leave_bytes = *std::max_element(run.left.begin(), run.left.end());
  r.squeeze_block_bytes = *std::min_element(run.squeezed.begin(), run.squeezed.end());
  for (std::uint64_t d : run.degraded)
    r.degraded_per_step +=
        static_cast<double>(d) / static_cast<double>(N * static_cast<std::size_t>(run.cfg.steps));
}

/// Time dilation undone in each GPU's times: measured times shrink by the scale, rates per unit
/// time grow by it. Returns the scale (1 off sim).
double undilate(gpu_threads& run) {
  const node_options& o = run.o;
  const double ts = o.kind == backend::sim ? o.time_scale : 1.0;
  for (std::size_t g = 0; g < run.devs.size(); ++g) {
    for (double& x : run.step_ms[g]) x /= ts;
    run.stall[g] /= ts;
    run.fault_page_ms[g] /= ts;
    run.faults_ms[g] *= ts;
    for (double& x : run.coll_time[g].ms) x /= ts;
  }
  return ts;
}

/// Each timed step's time (its slowest GPU's), their summary and the budget verdict.
void step_figures(const gpu_threads& run, node_result& r) {
  const bench_config& cfg = run.cfg;
  for (int s = cfg.warmup_steps; s < run.total; ++s) {
    double worst = 0;
    for (std::size_t g = 0; g < run.devs.size(); ++g)
      worst = std::max(worst, run.step_ms[g][static_cast<std::size_t>(s)]);
    r.step_ms.push_back(worst);
  }
  r.step = summarize(r.step_ms);
  r.meets_budget = r.step.p99 <= static_cast<double>(cfg.latency_budget.count());
}

/// The GPUs' figures combined: bytes paged, stalls, mismatches, fault waits and rates, HBM peak,
/// the collectives' time per layer. Returns the bytes all GPUs paged in per step.
double gpu_figures(const gpu_threads& run, node_result& r) {
  const bench_config& cfg = run.cfg;
  const std::size_t N = run.devs.size();
  const auto& coll_time = run.coll_time;
  double bytes = 0, st = 0, coll_ms = 0, coll_n = 0;
  for (std::size_t g = 0; g < N; ++g) {
    bytes += run.paged[g];
    st += run.stall[g];
    r.mismatches += run.bad[g];
    for (double x : coll_time[g].ms) coll_ms += x;
    coll_n += static_cast<double>(coll_time[g].ms.size());
  }
  r.bytes_per_step_per_gpu = bytes / static_cast<double>(N);
  for (std::size_t g = 0; g < N; ++g) {
    r.fault_ms_per_64mib_page += run.fault_page_ms[g] / static_cast<double>(N);
    r.faults_per_ms += run.faults_ms[g] / static_cast<double>(N);
    r.hbm_peak_pct = std::max(r.hbm_peak_pct, run.hbm_peak[g]);
  }
  r.stall_ms_per_step = st / static_cast<double>(N);
  r.collective_ms_per_layer =
      run.mode == node_mode::tensor_parallel ? (coll_n > 0 ? coll_ms / coll_n : 0)
      : run.mode == node_mode::swap_and_shard
          ? r.stall_ms_per_step / static_cast<double>(std::max(1, cfg.layers))
          : 0;
  return bytes;
}

/// Swap-and-shard: layers per synchronisation, barriers per layer, where layers came from and the
/// interconnect rate the plan used.
void swap_shard_figures(const swap_shard& ss, std::size_t per_sync, node_result& r) {
  const swap_shard_metrics sm = ss.metrics();
  r.layers_per_sync = per_sync;
  r.barriers_per_layer = sm.layers_acquired > 0 ? static_cast<double>(sm.compute_waits) /
                                                      static_cast<double>(sm.layers_acquired)
                                                : 0;
  r.layer_source = sm.layers_from_host > 0 ? "host" : "peers";
  r.interconnect_gbps = static_cast<double>(sm.interconnect_bytes_per_second) / 1e9;
  r.interconnect_measured = sm.interconnect_measured;
}

/// The host side over the timed wall time: all GPUs' page-in rate (`bytes` per step), the shared
/// link's use, the host tier, the per-GPU link use. `ts`: the time dilation undone.
void host_figures(const gpu_threads& run, double bytes, double ts, node_result& r) {
  const bench_config& cfg = run.cfg;
  const std::size_t N = run.devs.size();
  const double secs = std::chrono::duration<double>(run.timed_end - run.timed_begin).count();
  const double host_rate =
      secs > 0 ? bytes * static_cast<double>(cfg.steps) / secs : 0;  // dilated, B/s
  r.host_gbps = host_rate * ts / 1e9;
  const node_metrics m = run.nd.metrics();
  if (!m.links.empty() && m.links[0].h2d_rate_bytes_per_second > 0 && secs > 0) {
    r.shared_link_use = host_rate / static_cast<double>(m.links[0].h2d_rate_bytes_per_second);
  }
  r.host_tier_bytes = m.host_used_bytes;
  r.host_budget_bytes = m.host_capacity_bytes;
  if (cfg.link_peak_bytes_per_second > 0) {
    r.link_use_pct = 100.0 * host_rate / static_cast<double>(N) /
                     static_cast<double>(cfg.link_peak_bytes_per_second);
  }
}

}  // namespace

node_result results_of(gpu_threads& run, int resident_layers, std::size_t per_sync) {
  const node_mode mode = run.mode;
  node_result r;
  r.mode =
      run.squeeze ? std::string(to_string(mode)) + ", HBM short" : std::string(to_string(mode));
  r.gpus = run.devs.size();
  if (run.squeeze) squeeze_figures(run, r);
  const double ts = undilate(run);
  r.time_scale = ts;
  step_figures(run, r);
  const double bytes = gpu_figures(run, r);
  r.timing_only = run.timing_only;
  r.resident_layers = resident_layers;
  if (run.ss) swap_shard_figures(*run.ss, per_sync, r);
  host_figures(run, bytes, ts, r);
  return r;
}

}  // namespace htp::bench::node_run
