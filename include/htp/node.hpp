// A node: several GPUs of one process over ONE pinned host tier. See docs/multi_gpu.md.
//
// Note [Node]
// - The node owns the host tier once (pinned, portable to every GPU: cudaHostAllocPortable; one
//   per NUMA node when the GPUs sit on several, see node_config::numa_placement) and one
//   pager per GPU on top of it. Each pager has no host tier of its own: the node lends it the
//   node's host memory (pager::add_host_region) and registers tensors there
//   (pager::register_tensor_at), so a weight has one host copy however many GPUs page it in.
// - Three ways to register: replicated (a weight any GPU may page in: data-parallel replicas),
//   sharded (N shards, shard g paged only into GPU g: tensor parallelism), local (one GPU's own
//   tensor, e.g. its KV blocks, still in the shared tier). Mutable tensors are never replicated:
//   two GPUs writing back one host copy would race.
// - Link budgets: every GPU keeps its own token buckets (pager_config h2d/d2h); GPUs that share an
//   upstream link (a PCIe root port, a NUMA node's memory bandwidth) also draw from a
//   shared_link, configured here or discovered from sysfs on cuda (shared_link.hpp).
// - Thread safety: every member may be called from any thread; the pagers are thread-safe, and
//   the node's registry has its own lock, never held across a pager call that copies.
#pragma once

#include <htp/device.hpp>
#include <htp/pager.hpp>
#include <htp/shared_link.hpp>
#include <htp/slab_allocator.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace htp {

/// GPUs that share an upstream link, and its caps. Groups nest or are disjoint: a PCIe switch's
/// GPUs inside their NUMA node's, which the node's other switches share too. A chunk crosses
/// every cap from its GPU's innermost group to the outermost (shared_link's chain).
struct node_link_group {
  std::string name;               ///< unique; e.g. "pcie:pci0000:00/0000:00:01.0", "numa1".
  std::vector<std::size_t> gpus;  ///< indices into the node's GPUs.
  std::uint64_t h2d_bytes_per_second = 0;  ///< shared host-to-device cap; 0 = none.
  std::uint64_t d2h_bytes_per_second = 0;  ///< shared device-to-host cap; 0 = none.
  /// One cap both directions share (a NUMA node's memory bandwidth: H2D reads and D2H writes the
  /// same DIMMs); 0 = none. Sits above the group's directional caps, so a group with it may not
  /// lie inside a group with a directional cap.
  std::uint64_t combined_bytes_per_second = 0;
};

/// Configuration of a node.
struct node_config {
  std::size_t host_budget_bytes = 0;  ///< the one pinned host tier, for every GPU.
  std::size_t host_slab_bytes = std::size_t{64} << 20;
  std::size_t host_page_bytes = 0;  ///< 0 = automatic (slab_allocator_config::page_bytes).
  /// Each GPU's pager. host_budget_bytes must be 0 (the node's tier serves them all).
  pager_config gpu;
  /// Empty, or one config per GPU (overrides `gpu`; same rule for host_budget_bytes).
  std::vector<pager_config> per_gpu;
  /// Shared upstream links. Empty and discover_shared_links: found from the topology (sysfs on
  /// cuda; device_properties on sim): GPUs under one PCIe root port share it (cap = link_share x
  /// the first GPU's H2D/D2H cap), and GPUs of one NUMA node share its memory bandwidth (combined
  /// cap numa_bytes_per_second). Configured groups: see node_link_group.
  std::vector<node_link_group> shared_links;
  bool discover_shared_links = true;
  double link_share = 1.0;  ///< discovered caps as a fraction of one GPU's own cap; in (0, 1].
  /// The combined cap of each discovered NUMA group: what DMA may draw from one node's memory,
  /// both directions together. sysfs does not tell memory bandwidth, so it is given (e.g. 8
  /// channels of DDR5-4800: about 300e9, less what the CPU needs); 0 = the groups are listed in
  /// node_metrics::links but not capped.
  std::uint64_t numa_bytes_per_second = 0;
  /// With GPUs on two or more NUMA nodes (device_properties::numa_node), one host tier per node,
  /// host_budget_bytes split evenly, each reserved and pinned while the thread prefers that node
  /// (set_mempolicy MPOL_PREFERRED; no libnuma needed); a GPU's shards and local tensors go to its
  /// node's tier, replicated weights to GPU 0's. Where the kernel refuses the policy the tiers are
  /// still made, unplaced, and node_metrics::host_tiers says why (the clean fallback).
  bool numa_placement = true;
};

/// A tensor registered with a node. A value; stale once unregistered (generation).
struct node_tensor {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;  ///< 0 = null
  explicit operator bool() const noexcept { return generation != 0; }
  friend bool operator==(node_tensor a, node_tensor b) noexcept {
    return a.index == b.index && a.generation == b.generation;
  }
  friend bool operator!=(node_tensor a, node_tensor b) noexcept { return !(a == b); }
};

/// How a node tensor is laid out over the GPUs.
enum class node_layout { replicated, sharded, local };

/// One shared link's use.
struct node_link_metrics {
  std::string name;
  std::vector<std::size_t> gpus;
  std::uint64_t h2d_rate_bytes_per_second = 0;  ///< 0 = not capped.
  std::uint64_t h2d_bytes = 0;                  ///< bytes that crossed it host-to-device.
  std::uint64_t d2h_rate_bytes_per_second = 0;
  std::uint64_t d2h_bytes = 0;
  std::uint64_t combined_rate_bytes_per_second = 0;  ///< both directions together; 0 = not capped.
  std::uint64_t combined_bytes = 0;
  std::string parent;  ///< the enclosing group's name; empty at the top.
};

/// One host tier of the node (one per NUMA node of its GPUs, or one).
struct node_host_tier_metrics {
  int numa_node = -1;             ///< the node its memory prefers; -1 = no preference
  std::string placement;          ///< "node k" when the preference applied, else why not
  std::vector<std::size_t> gpus;  ///< the GPUs whose shards and local tensors it holds
  std::size_t capacity_bytes = 0;
  std::size_t used_bytes = 0;  ///< requested bytes of the host copies in it
};

/// A snapshot of a node's metrics.
struct node_metrics {
  std::size_t host_capacity_bytes = 0;  ///< all host tiers together
  std::vector<node_host_tier_metrics> host_tiers;
  std::size_t host_used_bytes = 0;  ///< requested bytes of every node tensor's host copies.
  std::size_t tensors = 0;
  std::size_t replicated_bytes = 0;  ///< host bytes of replicated weights (held once, not N times).
  std::vector<pager_metrics> per_gpu;  ///< each GPU's pager metrics.
  std::vector<node_link_metrics> links;
};

class node {
 public:
  /// Reserves the host tier (pinned, portable to all GPUs; one per NUMA node of the GPUs with
  /// numa_placement) and builds one pager per GPU over it. The devices must outlive the node.
  /// @throws htp::invalid_argument for no GPUs, a null device, per_gpu of the wrong length, a
  /// per-GPU host budget, a bad link group (unknown or repeated GPU); what the pager and the
  /// slab allocator throw for their configs.
  node(std::vector<device*> gpus, node_config config);
  /// Drops every pager (waiting for their copies), then frees the host tier. Never throws.
  ~node();
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  std::size_t gpu_count() const noexcept;
  /// GPU g's pager: acquire, release, prefetch, schedules, as on one GPU.
  /// @throws htp::invalid_argument if g >= gpu_count().
  pager& gpu(std::size_t g);
  /// GPU g's device. @throws htp::invalid_argument if g >= gpu_count().
  device& device_of(std::size_t g);

  /// A weight any GPU may page in, with one host copy: `bytes` from `source` (null = zeros).
  /// @throws htp::invalid_argument if bytes == 0 or it can never fit some GPU's HBM;
  /// htp::out_of_memory if the host tier is full. Nothing is left behind on failure.
  node_tensor register_replicated(std::string name, std::size_t bytes,
                                  const void* source = nullptr);
  /// register_replicated for a weight stored compressed: encoded once as `format` (as
  /// register_sharded_compressed does) into a chunk-frame sequence whose pieces fit every GPU's
  /// pager (the smallest chunk_bytes decides), one copy of the wire bytes in the host tier (GPU 0's
  /// NUMA node), which every GPU's pager decodes on its page-ins
  /// (pager::register_compressed_tensor_at). On timing-only devices nothing is encoded: the wire
  /// size is modelled at GPU 0's pager's modelled_compression_ratio. Thread-safe.
  /// @throws as register_replicated, and as pager::register_compressed_tensor_at (a tensor too
  /// large for some GPU's HBM, a pager's chunk_bytes too small for a codec chunk).
  node_tensor register_replicated_compressed(std::string name, std::size_t bytes,
                                             weight_format format, const void* source = nullptr);
  /// A tensor split into one shard per GPU: shard g (`shard_bytes[g]` bytes, from `sources[g]`
  /// when given) is paged only into GPU g. @throws htp::invalid_argument if shard_bytes does not
  /// have one positive size per GPU or sources is neither empty nor one per GPU; as above.
  node_tensor register_sharded(std::string name, const std::vector<std::size_t>& shard_bytes,
                               tensor_kind kind, const std::vector<const void*>& sources = {});
  /// register_sharded for a weight stored compressed: shard g is encoded as `format` (the calling
  /// thread, and helpers for a large shard: codec_options::threads = 0) into a chunk-frame sequence
  /// cut for GPU g's pager (codec.hpp), only those wire bytes go into the host tier, and GPU g's
  /// pager decodes it on each page-in (pager::register_compressed_tensor_at; docs/pager.md,
  /// "Compressed weights"). On timing-only devices nothing is encoded: the wire size is modelled at
  /// the pagers' modelled_compression_ratio. Thread-safe.
  /// @throws as register_sharded, and as pager::register_compressed_tensor_at (a shard too large
  /// for HBM, the pagers' chunk_bytes too small for a codec chunk).
  node_tensor register_sharded_compressed(std::string name,
                                          const std::vector<std::size_t>& shard_bytes,
                                          weight_format format,
                                          const std::vector<const void*>& sources = {});
  /// A tensor of GPU g alone (its KV blocks, activations), held in the shared tier.
  /// @throws htp::invalid_argument if g >= gpu_count(); as above.
  node_tensor register_local(std::size_t g, std::string name, std::size_t bytes, tensor_kind kind,
                             const void* source = nullptr);
  /// The tensor's handle in GPU g's pager.
  /// @throws htp::invalid_argument for a stale tensor or one not on GPU g (a shard or local
  /// tensor of another GPU), naming the rule.
  tensor_handle on(node_tensor t, std::size_t g) const;
  /// How the tensor is placed. @throws htp::invalid_argument for a stale tensor.
  node_layout layout(node_tensor t) const;
  /// The host copy of shard `shard` (0 for replicated and local tensors): the authoritative bytes
  /// while no GPU holds a newer copy. @throws htp::invalid_argument for a stale tensor or a shard
  /// it does not have.
  extent host_copy(node_tensor t, std::size_t shard = 0) const;
  /// Unregisters the tensor from every GPU and frees its host copies.
  /// @throws htp::invalid_argument for a stale tensor or one still acquired on some GPU (then
  /// nothing changes).
  void unregister(node_tensor t);

  /// The host tier, GPU by GPU pager metrics, and shared-link use. Thread-safe.
  /// @throws as pager::metrics (every GPU's pager is asked).
  node_metrics metrics() const;
  /// Starts the counters afresh (e.g. after warm-up): every GPU's pager (pager::reset_metrics)
  /// and the bytes counted per shared link. States (host tier use, tensors) are untouched.
  /// Thread-safe.
  /// @throws as pager::metrics (every GPU's pager is asked).
  void reset_metrics();
  /// The shared links in use (configured or discovered).
  /// Never throws.
  std::vector<std::shared_ptr<shared_link>> shared_links() const;

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace htp
