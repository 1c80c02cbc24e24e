// htp-stream-bench --gpus N: the model's weights registered with the node as a mode lays them out,
// each GPU's view of them, and how the GPUs find them (schedules, or swap-and-shard's layers).
// See node_runner.hpp.
#pragma once

#include "node_plan.hpp"

#include <htp/collectives.hpp>
#include <htp/node.hpp>
#include <htp/swap_shard.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace htp::bench::node_run {

/// One weight as GPU g reads it: its handle (or its offset in a swap-and-shard layer) and checks.
struct gpu_weight {
  tensor_handle h;
  std::size_t offset = 0, bytes = 0;
  std::uint64_t rows = 0, cols = 0, sum = 0, head = 0, tail = 0;
};

/// Each GPU's view of every weight: [gpu][layer][tensor].
using node_weights = std::vector<std::vector<std::vector<gpu_weight>>>;

/// Registers cfg's layers with the node as `mode` lays them out, with the single-GPU run's
/// patterns (none when timing-only): replicated, column-sharded (resident where !paged_layer[l]),
/// or, for swap-and-shard, packed per layer into swap_layer_bytes / swap_layers for swap_shard.
/// Returns each GPU's view of every weight, [gpu][layer][tensor].
node_weights register_weights(const bench_config& cfg, node_mode mode, node& nd, bool timing_only,
                              const std::vector<bool>& paged_layer,
                              std::vector<std::size_t>& swap_layer_bytes,
                              std::vector<std::vector<unsigned char>>& swap_layers);

/// How the GPUs find their weights. Swap-and-shard: the swap_shard over the packed layers (which it
/// copies), returned. Otherwise each GPU's schedule: its paged tensors only, in layer order
/// (device-resident ones are always hits, and left in the schedule they would use up the
/// lookahead, so the next paged layer would load only when reached); returns null.
std::unique_ptr<swap_shard> arrange_weights(
    node_mode mode, const node_options& o, const node_plan& plan, node& nd, collectives& coll,
    const node_weights& w, const std::vector<std::size_t>& swap_layer_bytes,
    const std::vector<std::vector<unsigned char>>& swap_layers);

}  // namespace htp::bench::node_run
