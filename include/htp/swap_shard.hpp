// Swap-and-shard: each GPU holds 1/N of every layer (ZeRO-style), and layers are gathered into a
// staging buffer before they are needed, a group of `layers_per_sync` at a time, `ahead` groups
// ahead, overlapped with compute. See docs/multi_gpu.md, "Swap-and-shard".
//
// Note [Swap-and-shard]
// - Layer l is a sharded node tensor: N equal shards (the layer padded to a multiple of N bytes),
//   shard g paged by GPU g's pager like any tensor, so the GPUs' combined HBM holds what fits and
//   host paging covers the rest, with the pager's budgets, priorities and eviction.
// - Each GPU has `ahead` staging buffers (device-resident tensors of its pager: HBM only, no host
//   shadow), each holding `layers_per_sync` consecutive layers (a group), and a gather stream.
//   Gathering group q into buffer q % ahead on GPU g, on the gather stream: wait for the release of
//   the group that used the buffer before; then, for each layer of the group, either (peers)
//   acquire the own shard through the pager, all-gather the shards into the buffer over the
//   interconnect, and release the shard; or (host) load every shard's host copy into the buffer
//   through GPU g's transfer engine (prefetch priority, under the GPU's link caps). One event marks
//   the whole group ready.
// - The source is chosen per layer, the same on every rank (a collective needs all of them), from
//   the link rates, measured unless configured: peers when the shards all fit in HBM, else
//   whichever moves the layer sooner, peers (page the own shard in from host RAM, then all-gather
//   (N - 1) shards over the interconnect) or host (load all N shards over the GPU's host link).
//   With more than one GPU that is peers exactly when the interconnect is faster than the host
//   link; with one GPU, host (a gather would be an extra copy). The interconnect is measured by
//   timing a probe all-gather (in place, in staging buffer 0, best of three) at construction; the
//   host link's rate is GPU 0's calibrated H2D cap. metrics() reports the rates the plan used.
// - acquire() of a group's first layer makes `compute` wait for the group's event (on the device;
//   the host never blocks) and keeps the next `ahead - 1` groups issued; release() records a
//   marker event (no wait), and the buffer's next gather waits once for the marker of the group's
//   last layer. So compute and gathers synchronise once per group per GPU in each direction: with
//   the defaults (ahead = 2, layers_per_sync = 2) once per two layers, double-buffered, and a GPU
//   never waits for a gather of the group after next (metrics().compute_waits counts the waits).
//   A group's layers are acquired on one compute stream.
// - Calls per GPU follow the visit order, cyclic: swap_shard_config::order, by default the layer
//   order (0, 1, ..., L - 1, 0, ...); a training step's is forward then backward (0, ..., L - 1,
//   L - 1, ..., 0), so the gathers run `ahead` groups ahead in both directions (a group is
//   `layers_per_sync` consecutive visits, whatever their layers). With NCCL, each GPU's calls come
//   from its own thread, never inside collectives::group_start/group_end (a grouped all-gather is
//   enqueued only at group_end, after the buffer's ready event). Every GPU makes the same number of
//   acquires before the object is destroyed: the gathers they start are collectives, and one no
//   other rank matches never completes (the destructor finds such gathers and aborts the
//   collectives, see collectives::abort). Destroy it only after every acquired layer is released.
// - Look-ahead leaves work parked: after the last acquire, GPU g's gather stream still waits for
//   the next groups' host loads, which the transfer engine's dispatcher (a host thread) has yet to
//   issue, or for peers' all-gathers. A call that synchronises the whole device (cudaFree,
//   cudaFreeHost, cublasDestroy, ...) must not run while a stream waits for host-issued work, so
//   stop(g) comes first: it cancels the loads not yet issued (which releases their waits) and
//   drains the gather stream. The destructor does the same for every GPU before it frees or
//   releases anything.
#pragma once

#include <htp/collectives.hpp>
#include <htp/node.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace htp {

struct swap_shard_config {
  /// Staging buffers per GPU: groups gathered ahead (2 = double buffering).
  std::size_t ahead = 2;
  /// Layers per group: gathered together into one buffer, one synchronisation with compute per
  /// group. HBM for staging per GPU: ahead x layers_per_sync x the largest layer (padded to N).
  std::size_t layers_per_sync = 2;
  /// Per-GPU interconnect rate for the source choice, as (N - 1) shards per second of gathering
  /// (NVLink 4: about 450 GB/s each way). 0 = measured at construction by a probe all-gather of
  /// up to `probe_bytes` per rank (only when the shards do not all fit in HBM and N > 1).
  std::uint64_t interconnect_bytes_per_second = 0;
  std::size_t probe_bytes = std::size_t{32} << 20;
  /// Per-GPU host link rate; 0 = GPU 0's calibrated H2D cap.
  std::uint64_t host_bytes_per_second = 0;
  /// The visit order, cyclic: a GPU's v-th acquire() takes layer order[v % order.size()]. Empty:
  /// 0, 1, ..., L - 1. A training step: forward_backward_order(L). Each entry below L.
  std::vector<std::size_t> order;
};

/// A training step's visit order over `layers` layers: 0, 1, ..., L - 1, then L - 1, ..., 0 (the
/// backward pass reads each layer's weights again, in reverse). Never throws but std::bad_alloc.
std::vector<std::size_t> forward_backward_order(std::size_t layers);

enum class layer_source { peers, host };

struct swap_shard_metrics {
  std::uint64_t gathers = 0;          ///< layer gathers issued, over all GPUs.
  std::uint64_t peer_gathers = 0;     ///< of them, all-gathers from the shards in HBM.
  std::uint64_t host_loads = 0;       ///< of them, loads of every shard from host RAM.
  std::uint64_t gathered_bytes = 0;   ///< bytes landed in staging buffers.
  std::uint64_t layers_acquired = 0;  ///< acquire() calls, over all GPUs.
  std::uint64_t compute_waits = 0;    ///< device waits enqueued on compute streams: one per group.
  std::size_t layers_from_peers = 0;  ///< the source plan.
  std::size_t layers_from_host = 0;
  /// The rates the plan compared (0 where it did not need them: the shards all fit, or N = 1).
  std::uint64_t interconnect_bytes_per_second = 0;
  bool interconnect_measured = false;  ///< by the probe all-gather, not configured.
  std::uint64_t host_bytes_per_second = 0;
};

class swap_shard {
 public:
  /// Registers layer l (`layer_bytes[l]` bytes from `layer_sources[l]`, or zeros) as N shards and
  /// makes the staging buffers. When it measures the interconnect it issues one grouped probe
  /// all-gather for every rank from the calling thread and waits for it (host-blocking, no lock
  /// held). @throws htp::invalid_argument for no layers, a zero size, sources
  /// of the wrong length, collectives of another size than the node, ahead or layers_per_sync 0,
  /// an order entry that names no layer;
  /// what the node throws when the host tier cannot hold the layers; htp::out_of_memory when a
  /// GPU's HBM cannot hold its staging buffers.
  swap_shard(node& n, collectives& c, const std::vector<std::size_t>& layer_bytes,
             const std::vector<const void*>& layer_sources = {}, swap_shard_config config = {});
  /// Aborts the collectives if the GPUs' all-gathers do not match (one GPU acquired more than
  /// another), cancels the host loads not yet issued and waits for every gather stream (stop(g)
  /// for every GPU), and only then waits for the compute streams' releases, releases the staging
  /// buffers and unregisters the layers. Never throws. No other call may run concurrently.
  ~swap_shard();
  swap_shard(const swap_shard&) = delete;
  swap_shard& operator=(const swap_shard&) = delete;

  std::size_t layers() const noexcept;
  /// Where `layer` comes from. @throws htp::invalid_argument for a layer out of range.
  layer_source source(std::size_t layer) const;
  /// GPU g's full copy of `layer` (its first layer_bytes bytes), usable on `compute` until release.
  /// Stream order: work queued on `compute` after it runs once the layer's group is gathered.
  /// Thread safety: calls for one GPU from one thread at a time; GPUs may call concurrently.
  /// @throws htp::invalid_argument for g or layer out of range, a layer out of visit order on GPU
  /// g, or a group's later layer on another compute stream than its first; htp::logic_error after
  /// stop(g), and what the collectives throw (e.g. once aborted).
  device_span acquire(std::size_t g, std::size_t layer, stream_ref compute);
  /// Ends GPU g's use of `layer`: its buffer is reused once `compute` passes the release of the
  /// group's last layer.
  /// @throws htp::invalid_argument if `layer` is not GPU g's acquired layer.
  void release(std::size_t g, std::size_t layer, stream_ref compute);
  /// Ends GPU g's gathering, for good: the host loads of GPU g not yet issued are cancelled
  /// (nothing copied; the streams waiting on them go on), then the host blocks until GPU g's
  /// gather stream is idle. Call it before a call that synchronises GPU g's device (freeing device
  /// or pinned memory, destroying a cuBLAS handle) while the object lives, and on a failure path
  /// after collectives::abort (a peer gather waits for the other ranks until they gather too or
  /// the collectives are aborted). Afterwards GPU g's staging buffers hold no usable layer:
  /// acquire(g, ...) throws htp::logic_error, release() of the layer GPU g holds still works, and
  /// compute streams that waited for a group whose loads were cancelled read undefined bytes.
  /// Idempotent. Thread safety: as acquire for GPU g. @throws htp::invalid_argument for g out of
  /// range; htp::cuda_error if the device fails while draining.
  void stop(std::size_t g);
  /// Thread-safe.
  /// Never throws.
  swap_shard_metrics metrics() const;

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace htp
