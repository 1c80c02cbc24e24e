// htp-stream-bench --gpus N: the weights registered with the node and arranged for the GPUs. See
// node_weights.hpp.
#include "node_weights.hpp"

#include <htp/checksum.hpp>

#include <algorithm>
#include <string>
#include <utility>

namespace htp::bench::node_run {

namespace {

/// Its checksums when `data` is given; none (nothing to verify) for a timing-only run's null data.
gpu_weight checked(const unsigned char* data, std::size_t bytes, std::uint64_t rows,
                   std::uint64_t cols) {
  if (data == nullptr) return {tensor_handle{}, 0, bytes, rows, cols, 0, 0, 0};
  const weight_sums ws = sums_of(data, bytes);
  return {tensor_handle{}, 0, bytes, rows, cols, ws.sum, ws.head, ws.tail};
}

/// Data-parallel: one host copy of the weight (replicated), paged by every GPU.
void register_replicated(node& nd, const std::string& name, const layer_tensor& t,
                         std::size_t bytes, const unsigned char* data, node_weights& w) {
  const std::size_t N = nd.gpu_count();
  const node_tensor nt = nd.register_replicated(name, bytes, data);
  for (std::size_t g = 0; g < N; ++g) {
    gpu_weight gw = checked(data, bytes, t.rows, t.cols);
    gw.h = nd.on(nt, g);
    w[g].back().push_back(gw);
  }
}

/// Tensor-parallel: the weight split into N column shards, shard g paged by GPU g (compressed with
/// --compress), or each GPU's shard in its own HBM for the run, no host copy, when `keep`.
void register_column_shards(const bench_config& cfg, node& nd, const std::string& name,
                            const layer_tensor& t, std::size_t bytes, const unsigned char* data,
                            bool keep, node_weights& w) {
  const std::size_t N = nd.gpu_count();
  // Column shards (a vector, rows x 1, splits its bytes): shard g is the g-th 1/N of bytes.
  std::vector<std::size_t> sb(N);
  std::vector<const void*> src(N);
  std::size_t at = 0;
  for (std::size_t g = 0; g < N; ++g) {
    sb[g] = bytes / N + (g < bytes % N ? 1 : 0);
    src[g] = data ? data + at : nullptr;
    at += sb[g];
  }
  // Resident layers (keep): each GPU's shard in its own HBM for the run, no host copy.
  node_tensor nt;
  const weight_format f = cfg.type == dtype::fp16 ? weight_format::fp16 : weight_format::bf16;
  if (!keep && cfg.compress)  // --compress: the paged shards are stored compressed
    nt = nd.register_sharded_compressed(name, sb, f, data ? src : std::vector<const void*>{});
  else if (!keep)
    nt =
        nd.register_sharded(name, sb, tensor_kind::weight, data ? src : std::vector<const void*>{});
  at = 0;
  for (std::size_t g = 0; g < N; ++g) {
    gpu_weight gw =
        checked(data ? data + at : nullptr, sb[g], t.rows, std::max<std::uint64_t>(1, t.cols / N));
    gw.h =
        keep ? nd.gpu(g).register_resident(name, sb[g], tensor_kind::weight, src[g]) : nd.on(nt, g);
    w[g].back().push_back(gw);
    at += sb[g];
  }
}

}  // namespace

node_weights register_weights(const bench_config& cfg, node_mode mode, node& nd, bool timing_only,
                              const std::vector<bool>& paged_layer,
                              std::vector<std::size_t>& swap_layer_bytes,
                              std::vector<std::vector<unsigned char>>& swap_layers) {
  const std::size_t N = nd.gpu_count();
  const auto shapes = layer_tensors(cfg.model);
  const std::size_t elem = bytes_per_element(cfg.type);
  node_weights w(N);
  std::vector<unsigned char> buf;
  for (int l = 0; l < cfg.layers; ++l) {
    for (std::size_t g = 0; g < N; ++g) w[g].emplace_back();
    std::vector<unsigned char> packed;
    std::size_t packed_bytes = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const auto& t = shapes[i];
      const std::size_t bytes = t.rows * t.cols * elem;
      if (!timing_only) {  // timing-only: no bytes, no patterns (nothing is verified)
        buf.resize(bytes);
        fill_pattern(buf.data(), bytes,
                     cfg.seed * 1'000'003 + static_cast<std::uint64_t>(l) * 4096 + i);
      }
      const unsigned char* data = timing_only ? nullptr : buf.data();
      const std::string name = "L" + std::to_string(l) + "." + t.name;
      if (mode == node_mode::data_parallel) {
        register_replicated(nd, name, t, bytes, data, w);
      } else if (mode == node_mode::tensor_parallel) {
        register_column_shards(cfg, nd, name, t, bytes, data,
                               !paged_layer[static_cast<std::size_t>(l)], w);
      } else {
        gpu_weight gw = checked(data, bytes, t.rows, t.cols);
        gw.offset = packed_bytes;
        packed_bytes += bytes;
        if (data) packed.insert(packed.end(), buf.begin(), buf.end());
        for (std::size_t g = 0; g < N; ++g) w[g].back().push_back(gw);
      }
    }
    if (mode == node_mode::swap_and_shard) {
      swap_layer_bytes.push_back(packed_bytes);
      swap_layers.push_back(std::move(packed));
    }
  }
  return w;
}

std::unique_ptr<swap_shard> arrange_weights(
    node_mode mode, const node_options& o, const node_plan& plan, node& nd, collectives& coll,
    const node_weights& w, const std::vector<std::size_t>& swap_layer_bytes,
    const std::vector<std::vector<unsigned char>>& swap_layers) {
  if (mode == node_mode::swap_and_shard) {
    std::vector<const void*> src;
    for (const auto& v : swap_layers) src.push_back(v.empty() ? nullptr : v.data());
    swap_shard_config sc;
    // sim: the modelled interconnect; cuda: measured by swap_shard's probe all-gather.
    sc.interconnect_bytes_per_second =
        o.kind == backend::sim ? static_cast<std::uint64_t>(interconnect_gbps_of(o) * 1e9) : 0;
    sc.layers_per_sync = plan.per_sync;
    return std::make_unique<swap_shard>(nd, coll, swap_layer_bytes, src, sc);
  }
  for (std::size_t g = 0; g < w.size(); ++g) {
    std::vector<tensor_handle> order;
    for (std::size_t l = 0; l < w[g].size(); ++l) {
      if (!plan.paged_layer[l]) continue;
      for (const auto& gw : w[g][l]) order.push_back(gw.h);
    }
    nd.gpu(g).set_schedule(order, /*cyclic=*/true);
  }
  return nullptr;
}

}  // namespace htp::bench::node_run
