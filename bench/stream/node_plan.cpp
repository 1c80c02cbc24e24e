// htp-stream-bench --gpus N: a mode's plan and the node's configuration. See node_plan.hpp.
#include "node_plan.hpp"

#include "shared/htp_layout.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace htp::bench::node_run {

node_plan plan_node_run(const bench_config& cfg, node_mode mode, const node_options& o) {
  const std::size_t N = o.gpus;
  const auto shapes = layer_tensors(cfg.model);
  const std::size_t elem = bytes_per_element(cfg.type);
  std::uint64_t layer_bytes = 0;
  for (const auto& t : shapes) layer_bytes += t.rows * t.cols * elem;
  node_plan plan;
  // Tensor-parallel --resident: whole layers' shards stay in HBM, next to a window of three
  // paged layers (the one computing and two prefetched) and slack for rounding; the paged layers
  // spread evenly among them (shared/htp_layout.hpp, which the planner's htp model shares).
  plan.resident_layers =
      mode == node_mode::tensor_parallel && o.resident
          ? bench::resident_layers(cfg.hbm_budget_bytes, layer_bytes / N, shapes.size(),
                                   cfg.page_bytes, cfg.slab_bytes, cfg.layers)
          : 0;
  plan.paged_layer = paged_layers(cfg.layers, plan.resident_layers);
  const std::size_t paged_bytes = static_cast<std::size_t>(layer_bytes) *
                                  static_cast<std::size_t>(cfg.layers - plan.resident_layers);

  // Swap-and-shard's staging: two buffers of two layers (one synchronisation per two layers), or of
  // one layer when HBM is too short for that, next to one shard being paged in.
  if (mode == node_mode::swap_and_shard) {
    const std::size_t lb = static_cast<std::size_t>(layer_bytes);
    const auto need = [&](std::size_t k) { return 2 * k * lb + lb / N + 2 * cfg.slab_bytes; };
    for (std::size_t k : {std::size_t{2}, std::size_t{1}}) {
      if (cfg.hbm_budget_bytes >= need(k)) {
        plan.per_sync = k;
        break;
      }
    }
    if (plan.per_sync == 0) {
      plan.skip = "needs " + std::to_string(need(1) >> 20) +
                  " MiB of HBM per GPU (two staging layers, a shard and two slabs), has " +
                  std::to_string(cfg.hbm_budget_bytes >> 20) + " MiB";
      return plan;
    }
  }
  // The weights once (swap-and-shard's staging buffers are HBM only), plus room for padding.
  // Compressed tensor-parallel shards take their wire bytes (modelled ratio; at most the bytes).
  const double ratio = cfg.compress && mode == node_mode::tensor_parallel
                           ? std::min(1.0, cfg.modelled_compression_ratio + 0.01)
                           : 1.0;
  plan.host_need = (static_cast<std::size_t>(static_cast<double>(paged_bytes) * ratio) +
                    N * (std::size_t{256} << 20)) /
                       cfg.slab_bytes * cfg.slab_bytes +
                   4 * cfg.slab_bytes;
  if (o.host_budget_bytes > 0 && plan.host_need > o.host_budget_bytes) {
    plan.skip = "its host copies need " + std::to_string(plan.host_need / 1000000000) +
                " GB of host tier, more than the " +
                std::to_string(o.host_budget_bytes / 1000000000) + " GB given" +
                (mode == node_mode::tensor_parallel && !o.resident ? " (try --resident)" : "");
  }
  return plan;
}

node_config node_config_of(const bench_config& cfg, const node_options& o, const node_plan& plan,
                           bool squeeze) {
  const std::size_t N = o.gpus;
  node_config nc;
  nc.host_budget_bytes = o.host_budget_bytes > 0
                             ? o.host_budget_bytes / cfg.slab_bytes * cfg.slab_bytes
                             : plan.host_need;
  nc.host_slab_bytes = cfg.slab_bytes;
  nc.host_page_bytes = cfg.page_bytes;
  nc.gpu.hbm_budget_bytes = cfg.hbm_budget_bytes;
  nc.gpu.slab_bytes = cfg.slab_bytes;
  nc.gpu.page_bytes = cfg.page_bytes;
  nc.gpu.chunk_bytes = cfg.chunk_bytes;
  nc.gpu.modelled_compression_ratio = cfg.modelled_compression_ratio;
  nc.gpu.h2d.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  nc.gpu.d2h.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  // Two layers ahead (a layer is several tensors, some tiny: a count of 2 would cover a bias and a
  // norm).
  nc.gpu.prefetch_lookahead = static_cast<unsigned>(2 * layer_tensors(cfg.model).size());
  if (cfg.rate_bytes_per_second) nc.gpu.h2d.rate_bytes_per_second = *cfg.rate_bytes_per_second;
  if (squeeze) nc.gpu.on_oom = oom_policy::allow_degraded;
  if (o.shared_link_gbps > 0) {
    node_link_group grp;
    grp.name = "shared-h2d";
    for (std::size_t g = 0; g < N; ++g) grp.gpus.push_back(g);
    grp.h2d_bytes_per_second = static_cast<std::uint64_t>(o.shared_link_gbps * 1e9);
    nc.shared_links = {grp};
  }
  return nc;
}

double interconnect_gbps_of(const node_options& o) {
  return o.interconnect_gbps > 0 ? o.interconnect_gbps : o.sim_link_gbps * 450.0 / 55.0;
}

}  // namespace htp::bench::node_run
