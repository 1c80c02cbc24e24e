// htp-stream-bench --gpus N: how a mode lays the model out before anything is made (the layers kept
// resident, swap-and-shard's staging, the host tier it needs) and the node's configuration from
// it. See node_runner.hpp.
#pragma once

#include "node_runner.hpp"

#include <htp/node.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace htp::bench::node_run {

/// How one mode lays the model out before anything is made: the layers kept resident, which
/// layers are paged, swap-and-shard's layers per synchronisation and the host tier it needs.
struct node_plan {
  int resident_layers = 0;
  std::vector<bool> paged_layer;
  std::size_t per_sync = 0;   // swap-and-shard: layers per synchronisation
  std::size_t host_need = 0;  // host tier bytes the paged weights need
  std::string skip;           // non-empty: the mode cannot run, and why
};

/// The plan of `mode` for cfg and o: resident layers (tensor-parallel --resident), swap-and-shard's
/// staging (two buffers of two layers, or of one when HBM is too short for that) and the host tier;
/// plan.skip says why the mode cannot run when it cannot.
node_plan plan_node_run(const bench_config& cfg, node_mode mode, const node_options& o);

/// The node's configuration: the host tier (given, or what the plan needs), each GPU's pager with
/// cfg's budget, sizes and link, two layers of lookahead, degraded service when HBM is squeezed,
/// and the shared upstream link when asked for.
node_config node_config_of(const bench_config& cfg, const node_options& o, const node_plan& plan,
                           bool squeeze);

/// The modelled interconnect per GPU, GB/s: as given, else 450/55 of the link (NVLink 4 over PCIe).
double interconnect_gbps_of(const node_options& o);

}  // namespace htp::bench::node_run
