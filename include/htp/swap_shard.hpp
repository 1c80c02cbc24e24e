// Swap-and-shard: each GPU holds 1/N of every layer (ZeRO-style), and a layer is gathered into a
// staging slot when it is needed, `ahead` layers ahead, overlapped with compute. See
// docs/multi_gpu.md, "Swap-and-shard".
//
// Note [Swap-and-shard]
// - Layer l is a sharded node tensor: N equal shards (the layer padded to a multiple of N bytes),
//   shard g paged by GPU g's pager like any tensor, so the GPUs' combined HBM holds what fits and
//   host paging covers the rest, with the pager's budgets, priorities and eviction.
// - Each GPU has `ahead` staging slots (local mutable tensors of the node, pinned for the life of
//   this object) and a gather stream. Gathering layer l into slot l % ahead on GPU g, on the gather
//   stream: wait for the release of the layer that used the slot before; then either (peers) acquire
//   the own shard through the pager, all-gather the shards into the slot over the interconnect, and
//   release the shard; or (host) load every shard's host copy into the slot through GPU g's
//   transfer engine (prefetch priority, under the GPU's link caps). An event marks the slot ready.
// - The source is chosen per layer, the same on every rank (a collective needs all of them): peers
//   when the shards all fit in HBM or the interconnect is at least as fast as the host link, host
//   otherwise (then a peer gather would cost more than reading the layer from host RAM).
// - acquire() makes `compute` wait for the slot's event (on the device; the host never blocks) and
//   keeps the next `ahead - 1` gathers issued; release() records the event the slot's next gather
//   waits for. So compute and gathers meet once per layer per GPU, through two events, and with
//   ahead = 2 a GPU never waits for a gather of the layer after next.
// - Calls per GPU come in layer order (0, 1, ..., L - 1, 0, ...). With NCCL, each GPU's calls come
//   from its own thread, never inside collectives::group_start/group_end (a grouped all-gather is
//   enqueued only at group_end, after the slot's ready event). Every GPU makes the same number of
//   acquires before the object is destroyed: the gathers they start are collectives, and one no
//   other rank matches never completes (the destructor would wait for it forever). Destroy it only
//   after every acquired layer is released.
#pragma once

#include <htp/collectives.hpp>
#include <htp/node.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace htp {

struct swap_shard_config {
  std::size_t ahead = 2;  ///< staging slots per GPU: layers gathered ahead (2 = double buffering).
  /// Per-GPU interconnect rate for the source choice (NVLink 4: 450 GB/s each way).
  std::uint64_t interconnect_bytes_per_second = 450'000'000'000;
  /// Per-GPU host link rate; 0 = GPU 0's calibrated H2D cap.
  std::uint64_t host_bytes_per_second = 0;
};

enum class layer_source { peers, host };

struct swap_shard_metrics {
  std::uint64_t gathers = 0;          ///< layer gathers issued, over all GPUs.
  std::uint64_t peer_gathers = 0;     ///< of them, all-gathers from the shards in HBM.
  std::uint64_t host_loads = 0;       ///< of them, loads of every shard from host RAM.
  std::uint64_t gathered_bytes = 0;   ///< bytes landed in staging slots.
  std::size_t layers_from_peers = 0;  ///< the source plan.
  std::size_t layers_from_host = 0;
};

class swap_shard {
 public:
  /// Registers layer l (`layer_bytes[l]` bytes from `layer_sources[l]`, or zeros) as N shards and
  /// makes the staging slots. @throws htp::invalid_argument for no layers, a zero size, sources of
  /// the wrong length, collectives of another size than the node, or ahead < 1; what the node
  /// throws when the host tier or an HBM budget cannot hold it.
  swap_shard(node& n, collectives& c, const std::vector<std::size_t>& layer_bytes,
             const std::vector<const void*>& layer_sources = {}, swap_shard_config config = {});
  /// Waits for every gather, releases the slots, unregisters the layers. Never throws.
  ~swap_shard();
  swap_shard(const swap_shard&) = delete;
  swap_shard& operator=(const swap_shard&) = delete;

  std::size_t layers() const noexcept;
  layer_source source(std::size_t layer) const;
  /// GPU g's full copy of `layer` (its first layer_bytes bytes), usable on `compute` until release.
  /// @throws htp::invalid_argument for g or layer out of range, or a layer out of order on GPU g.
  device_span acquire(std::size_t g, std::size_t layer, stream_ref compute);
  /// Ends GPU g's use of `layer`: its slot is reused once `compute` passes this point.
  /// @throws htp::invalid_argument if `layer` is not GPU g's acquired layer.
  void release(std::size_t g, std::size_t layer, stream_ref compute);
  swap_shard_metrics metrics() const;

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace htp
