// htp-stream-bench --gpus N. See node_runner.hpp. One mode's run: plan it (node_plan), make the
// node and its collectives, register and arrange the weights (node_weights), run one thread per
// GPU (node_threads) and combine what they measured (node_results).
#include "node_runner.hpp"

#include "common/bench_device.hpp"
#include "node_plan.hpp"
#include "node_results.hpp"
#include "node_threads.hpp"
#include "node_weights.hpp"

#include <htp/collectives.hpp>
#include <htp/detail/check.hpp>
#include <htp/node.hpp>
#include <htp/swap_shard.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

namespace htp::bench {

const char* to_string(node_mode m) noexcept {
  switch (m) {
    case node_mode::data_parallel: return "data-parallel";
    case node_mode::tensor_parallel: return "tensor-parallel";
    case node_mode::swap_and_shard: return "swap-and-shard";
  }
  return "?";
}

using namespace node_run;

namespace {

/// The node's N devices: the first N cuda GPUs, or N sim devices each with the single-GPU run's
/// modelled link. @throws htp::invalid_argument for more cuda GPUs than are visible.
std::vector<std::unique_ptr<device>> make_devices(const bench_config& cfg, const node_options& o,
                                                  bool timing_only) {
  const std::size_t N = o.gpus;
  if (o.kind == backend::cuda) {
    const int visible = cuda_device_count();
    HTP_EXPECTS(N <= static_cast<std::size_t>(visible), invalid_argument, "--gpus ", N, ": ",
                visible, " CUDA GPU(s) visible; give at most ", visible,
                " (or run the node on sim with --backend sim)");
  }
  device_options d;
  d.backend = o.kind == backend::cuda ? "cuda" : "sim";
  d.sim_memory_bytes = cfg.hbm_budget_bytes + (std::size_t{1} << 30);
  d.sim_link_gbps = o.sim_link_gbps;
  d.sim_latency_us = o.sim_latency_us;
  d.sim_timing_only = timing_only;
  std::vector<std::unique_ptr<device>> devs;
  for (std::size_t g = 0; g < N; ++g) {
    d.ordinal = static_cast<int>(g);
    devs.push_back(make_bench_device(d));
  }
  return devs;
}

/// The node's collectives: sim's at the modelled interconnect; on cuda NCCL's, or one-rank copies
/// for a single GPU without NCCL.
std::unique_ptr<collectives> make_node_collectives(const node_options& o,
                                                   const std::vector<device*>& ptrs) {
  if (o.kind == backend::sim)
    return make_sim_collectives(ptrs, static_cast<std::uint64_t>(interconnect_gbps_of(o) * 1e9));
  if (ptrs.size() == 1 && !nccl_available()) return make_one_rank_collectives(*ptrs[0]);
  return make_nccl_collectives(ptrs);
}

}  // namespace

node_result run_node_mode(const bench_config& cfg, node_mode mode, const node_options& o) {
  HTP_EXPECTS(o.gpus >= 1, invalid_argument, "--gpus ", o.gpus, ": at least one GPU");
  const std::size_t N = o.gpus;
  const bool timing_only = o.timing_only && o.kind == backend::sim;
  const node_plan plan = plan_node_run(cfg, mode, o);
  if (!plan.skip.empty()) {
    node_result r;
    r.mode = to_string(mode);
    r.gpus = N;
    r.skipped = true;
    r.skip_reason = plan.skip;
    return r;
  }
  // N devices, each with the single-GPU run's modelled link (sim) or the first N GPUs (cuda); one
  // node over them.
  std::vector<std::unique_ptr<device>> devs = make_devices(cfg, o, timing_only);
  std::vector<device*> ptrs;
  for (const auto& d : devs) ptrs.push_back(d.get());
  const bool squeeze = o.squeeze_leave_bytes > 0 && mode == node_mode::tensor_parallel;
  node nd(ptrs, node_config_of(cfg, o, plan, squeeze));
  std::unique_ptr<collectives> coll = make_node_collectives(o, ptrs);

  // The weights, with the single-GPU run's patterns (same seeds), so the bytes checked are the
  // bytes the single-GPU policies read.
  std::vector<std::size_t> swap_layer_bytes;
  std::vector<std::vector<unsigned char>> swap_layers;
  const auto w =
      register_weights(cfg, mode, nd, timing_only, plan.paged_layer, swap_layer_bytes, swap_layers);
  std::unique_ptr<swap_shard> ss =
      arrange_weights(mode, o, plan, nd, *coll, w, swap_layer_bytes, swap_layers);
  swap_layers.clear();

  // One thread per GPU, as an engine drives a node; each step's time is its slowest GPU's.
  gpu_threads run{
      cfg, mode, o, nd, *coll, ss.get(), devs, w, timing_only, squeeze, injected_failure(o), N};
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < N; ++g) threads.emplace_back([&run, g] { run_gpu(run, g); });
  for (auto& t : threads) t.join();
  if (run.first_failed < N)
    std::rethrow_exception(run.err[run.first_failed]);  // the cause, not its echoes

  node_result r = results_of(run, plan.resident_layers, plan.per_sync);
  ss.reset();  // before the node: its slots and layers live in the node
  return r;
}

}  // namespace htp::bench
