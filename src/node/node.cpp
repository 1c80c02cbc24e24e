// The node: one host tier, one pager per GPU, shared upstream links. See include/htp/node.hpp.
#include <array>
#include <htp/node.hpp>

#include <htp/detail/check.hpp>
#include <htp/detail/topology.hpp>

#include "node/links.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

namespace htp {

namespace {

struct record {
  std::string name;
  node_layout layout = node_layout::replicated;
  std::vector<extent> host;            // one per shard (sharded), else one
  std::vector<std::size_t> tier;       // the host tier of each extent
  std::vector<tensor_handle> handles;  // per GPU; null where the tensor is not
  std::uint32_t generation = 0;
  bool live = false;
};

}  // namespace

/// One host tier: pinned memory preferring one NUMA node (or no preference).
struct host_tier {
  int numa_node = -1;
  std::string placement;  // "node k" when the preference applied, else why not
  std::unique_ptr<slab_allocator> alloc;
  std::size_t used = 0;
};

struct node::impl {
  std::vector<device*> devs;
  node_config cfg;
  std::vector<host_tier> hosts;      // one per NUMA node of the GPUs, or one
  std::vector<std::size_t> tier_of;  // per GPU: the host tier of its NUMA node
  detail::node_links links;
  std::vector<std::unique_ptr<pager>> pagers;  // after host: destroyed first
  mutable std::mutex mu;
  std::vector<record> records;
  std::vector<std::uint32_t> free_slots;
  std::size_t replicated_bytes = 0, live = 0;  // host bytes used: the tiers' `used`
  /// Per link entry: bytes_taken of its (combined, h2d, d2h) buckets at the last reset_metrics.
  std::vector<std::array<std::uint64_t, 3>> link_baseline;

  std::uint64_t since_reset(std::size_t entry, std::size_t which, std::uint64_t taken) const {
    return entry < link_baseline.size() ? taken - link_baseline[entry][which] : taken;
  }

  const record& live_record(node_tensor t, const char* call) const {
    HTP_EXPECTS(t && t.index < records.size() && records[t.index].live &&
                    records[t.index].generation == t.generation,
                invalid_argument, "node::", call, ": stale or null node_tensor (index ", t.index,
                ", generation ", t.generation, "); it was unregistered or never registered");
    return records[t.index];
  }
  /// A host extent of `bytes` in GPU g's host tier, filled from `source` (null = zeros), added to
  /// r.
  void add_host_extent(record& r, std::size_t g, std::size_t bytes, const void* source) {
    const std::size_t t = tier_of[g];
    const extent e = hosts[t].alloc->allocate(bytes);
    r.host.push_back(e);
    r.tier.push_back(t);
    if (devs[g]->properties().timing_only) {
      // a timing-only device's host tier holds no bytes
    } else if (source != nullptr) {
      std::memcpy(e.ptr, source, bytes);
    } else {
      std::memset(e.ptr, 0, bytes);
    }
  }
  /// Frees every host extent of r.
  void free_host(const record& r) {
    for (std::size_t i = 0; i < r.host.size(); ++i)
      hosts[r.tier[i]].alloc->deallocate(r.host[i].ptr, r.host[i].bytes);
  }
  /// Registers `r` (host extents filled) in the pagers of `where` (per extent index) and stores it.
  /// `coded`, when given, holds each host extent's chunk-frame layout (compressed weights).
  node_tensor commit(record r, const std::vector<std::pair<std::size_t, std::size_t>>& where,
                     tensor_kind kind,
                     const std::vector<std::shared_ptr<const coded_layout>>* coded = nullptr);
  /// Makes the host tier(s) for `devs` per `cfg` and fills `tier_of` (node::node's step).
  void make_host_tiers(std::size_t largest_hbm);
};

void node::impl::make_host_tiers(std::size_t largest_hbm) {
  impl& s = *this;
  const std::size_t n = s.devs.size();
  // The host tier, once: pinned, portable to every GPU. With NUMA placement and GPUs on several
  // NUMA nodes, one tier per node (the budget split evenly), reserved while the thread prefers
  // that node, so each GPU's shards sit in its own node's memory. Reservations are at least as
  // large as the largest HBM budget, so any tensor that fits a GPU has a host extent.
  std::vector<int> numa_nodes;  // distinct known nodes, in GPU order
  for (device* d : s.devs) {
    const int nn = d->properties().numa_node;
    if (nn >= 0 && std::find(numa_nodes.begin(), numa_nodes.end(), nn) == numa_nodes.end())
      numa_nodes.push_back(nn);
  }
  const bool per_numa = s.cfg.numa_placement && numa_nodes.size() >= 2;
  if (!per_numa)
    numa_nodes = {numa_nodes.size() == 1 && s.cfg.numa_placement ? numa_nodes.front() : -1};
  s.tier_of.assign(n, 0);  // a GPU of unknown NUMA node uses the first tier
  for (std::size_t g = 0; g < n && per_numa; ++g) {
    const auto it =
        std::find(numa_nodes.begin(), numa_nodes.end(), s.devs[g]->properties().numa_node);
    if (it != numa_nodes.end()) s.tier_of[g] = static_cast<std::size_t>(it - numa_nodes.begin());
  }
  for (std::size_t t = 0; t < numa_nodes.size(); ++t) {
    const std::size_t first_gpu = static_cast<std::size_t>(
        std::find(s.tier_of.begin(), s.tier_of.end(), t) - s.tier_of.begin());
    slab_allocator_config hc;
    hc.t = tier::host;
    hc.budget_bytes = s.cfg.host_budget_bytes / numa_nodes.size();
    hc.slab_bytes = s.cfg.host_slab_bytes;
    hc.page_bytes = s.cfg.host_page_bytes;
    if (hc.slab_bytes > 0) {
      hc.slabs_per_reservation =
          (std::max(largest_hbm, std::size_t{1} << 30) + hc.slab_bytes - 1) / hc.slab_bytes;
    }
    host_tier ht;
    ht.numa_node = numa_nodes[t];
    {
      const detail::numa_preference prefer(ht.numa_node);
      ht.placement =
          prefer.applied() ? "node " + std::to_string(ht.numa_node)
          : ht.numa_node < 0
              ? std::string("no NUMA preference (GPU NUMA nodes unknown or numa_placement off)")
              : "not placed: " + prefer.why();
      ht.alloc = std::make_unique<slab_allocator>(*s.devs[first_gpu],
                                                  hc);  // pinning threads inherit the policy
    }
    s.hosts.push_back(std::move(ht));
  }
}

node::node(std::vector<device*> gpus, node_config config) : p_(std::make_unique<impl>()) {
  impl& s = *p_;
  HTP_EXPECTS(!gpus.empty(), invalid_argument, "node: no GPUs given; pass at least one device");
  for (std::size_t g = 0; g < gpus.size(); ++g) {
    HTP_EXPECTS(gpus[g] != nullptr, invalid_argument, "node: GPU ", g, " is a null device");
  }
  HTP_EXPECTS(config.per_gpu.empty() || config.per_gpu.size() == gpus.size(), invalid_argument,
              "node_config.per_gpu has ", config.per_gpu.size(), " configs for ", gpus.size(),
              " GPUs; give none (node_config.gpu for all) or one per GPU");
  HTP_EXPECTS(config.link_share > 0 && config.link_share <= 1, invalid_argument,
              "node_config.link_share is ", config.link_share, "; it must be in (0, 1]");
  s.devs = std::move(gpus);
  s.cfg = std::move(config);
  const std::size_t n = s.devs.size();
  std::vector<pager_config> pcs(n, s.cfg.gpu);
  if (!s.cfg.per_gpu.empty()) pcs = s.cfg.per_gpu;
  std::size_t largest_hbm = 0, largest_chunk = 0;
  for (std::size_t g = 0; g < n; ++g) {
    HTP_EXPECTS(pcs[g].host_budget_bytes == 0, invalid_argument, "node_config.",
                s.cfg.per_gpu.empty() ? "gpu" : "per_gpu[" + std::to_string(g) + "]",
                ".host_budget_bytes is ", pcs[g].host_budget_bytes,
                "; it must be 0: the node's one host tier (node_config.host_budget_bytes) "
                "serves every GPU");
    largest_hbm = std::max(largest_hbm, pcs[g].hbm_budget_bytes);
    largest_chunk = std::max(largest_chunk, pcs[g].chunk_bytes);
  }

  s.make_host_tiers(largest_hbm);

  // Shared links: configured, or discovered from the topology (PCIe root ports inside NUMA nodes).
  const std::uint64_t burst = 2 * static_cast<std::uint64_t>(largest_chunk);
  if (!s.cfg.shared_links.empty() || !s.cfg.discover_shared_links) {
    const std::string bad = detail::build_node_links(s.cfg.shared_links, n, burst, s.links);
    HTP_EXPECTS(bad.empty(), invalid_argument, "node_config.", bad);
  } else {
    std::vector<node_link_group> pcie = detail::discover_pcie_groups(s.devs);
    for (node_link_group& grp : pcie)
      grp.h2d_bytes_per_second = grp.d2h_bytes_per_second = 1;  // set below
    std::vector<node_link_group> all = pcie;
    for (node_link_group& grp : detail::discover_numa_groups(s.devs, s.cfg.numa_bytes_per_second))
      all.push_back(grp);
    // A topology whose root ports straddle NUMA nodes (or cap directions above memory) keeps its
    // PCIe groups alone rather than failing the node.
    if (!detail::build_node_links(all, n, burst, s.links).empty()) {
      const std::string bad = detail::build_node_links(pcie, n, burst, s.links);
      HTP_ASSERT(bad.empty(), "discovered PCIe groups are disjoint: ", bad);
    }
    for (std::size_t k = 0; k < pcie.size(); ++k)
      s.links.entries[k].follows_calibration = true;  // listed first
  }

  std::vector<extent> host_memory;
  for (const host_tier& ht : s.hosts) {
    for (const extent& r : ht.alloc->reservations()) host_memory.push_back(r);
  }
  for (std::size_t g = 0; g < n; ++g) {
    pager_config pc = pcs[g];
    pc.h2d.upstream = s.links.upstream(g, copy_direction::host_to_device);
    pc.d2h.upstream = s.links.upstream(g, copy_direction::device_to_host);
    s.pagers.push_back(std::make_unique<pager>(*s.devs[g], pc));
    for (detail::node_link_entry& e : s.links.entries) {
      if (!e.follows_calibration || e.group.gpus.front() != g) continue;
      // The first GPU of a discovered PCIe group is calibrated now: the shared caps follow its own.
      const transfer_metrics m = s.pagers.back()->engine().metrics();
      const auto share = [&](std::uint64_t cap) {
        return std::max<std::uint64_t>(
            1, static_cast<std::uint64_t>(static_cast<double>(cap) * s.cfg.link_share));
      };
      e.group.h2d_bytes_per_second = share(m.h2d.effective_rate());
      e.group.d2h_bytes_per_second = share(m.d2h.effective_rate());
      e.h2d->set_rate(e.group.h2d_bytes_per_second);
      e.d2h->set_rate(e.group.d2h_bytes_per_second);
    }
    for (const extent& r : host_memory)
      s.pagers.back()->add_host_region(r.ptr, r.bytes, host_region_kind::pinned);
  }
}

node::~node() {
  // Pagers first (they wait for their copies and hold regions of the host tier), then the tier.
  p_->pagers.clear();
  p_->hosts.clear();
}

std::size_t node::gpu_count() const noexcept { return p_->pagers.size(); }

pager& node::gpu(std::size_t g) {
  HTP_EXPECTS(g < p_->pagers.size(), invalid_argument, "node::gpu(", g, "): the node has ",
              p_->pagers.size(), " GPUs (0..", p_->pagers.size() - 1, ")");
  return *p_->pagers[g];
}

device& node::device_of(std::size_t g) {
  HTP_EXPECTS(g < p_->devs.size(), invalid_argument, "node::device_of(", g, "): the node has ",
              p_->devs.size(), " GPUs");
  return *p_->devs[g];
}

node_tensor node::impl::commit(record r,
                               const std::vector<std::pair<std::size_t, std::size_t>>& where,
                               tensor_kind kind,
                               const std::vector<std::shared_ptr<const coded_layout>>* coded) {
  // where: (GPU, host extent index). Register in each pager; on failure undo all of it.
  r.handles.assign(pagers.size(), tensor_handle{});
  try {
    for (const auto& [g, e] : where) {
      r.handles[g] =
          coded != nullptr
              ? pagers[g]->register_compressed_tensor_at(r.name, r.host[e].ptr, (*coded)[e])
              : pagers[g]->register_tensor_at(r.name, r.host[e].bytes, kind, r.host[e].ptr);
    }
  } catch (...) {
    for (std::size_t g = 0; g < pagers.size(); ++g) {
      if (r.handles[g]) pagers[g]->unregister_tensor(r.handles[g]);
    }
    free_host(r);
    throw;
  }
  std::lock_guard lock(mu);
  std::uint32_t slot;
  if (!free_slots.empty()) {
    slot = free_slots.back();
    free_slots.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(records.size());
    records.emplace_back();
  }
  r.generation = records[slot].generation + 1;
  r.live = true;
  for (std::size_t i = 0; i < r.host.size(); ++i) hosts[r.tier[i]].used += r.host[i].bytes;
  if (r.layout == node_layout::replicated) replicated_bytes += r.host.front().bytes;
  ++live;
  records[slot] = std::move(r);
  return node_tensor{slot, records[slot].generation};
}

node_tensor node::register_replicated(std::string name, std::size_t bytes, const void* source) {
  HTP_EXPECTS(bytes > 0, invalid_argument, "node::register_replicated('", name,
              "', 0 bytes): a tensor needs a byte");
  record r;
  r.name = std::move(name);
  r.layout = node_layout::replicated;
  p_->add_host_extent(r, 0, bytes, source);  // GPU 0's NUMA node
  std::vector<std::pair<std::size_t, std::size_t>> where;
  for (std::size_t g = 0; g < p_->pagers.size(); ++g) where.emplace_back(g, 0);
  return p_->commit(std::move(r), where, tensor_kind::weight);
}

namespace {

/// `bytes` of `format` weights from `src` (null: zeros) as a chunk-frame sequence of codec chunks
/// whose pieces fit a pager's `pager_chunk_bytes`: its layout, and its wire bytes (none on a
/// timing-only device, where the layout is modelled at `ratio`).
std::shared_ptr<const coded_layout> encode_sequence(const char* what, const std::string& name,
                                                    std::size_t bytes, weight_format format,
                                                    const void* src, std::size_t pager_chunk_bytes,
                                                    bool timing_only, double ratio,
                                                    std::vector<std::uint8_t>& wire) {
  const std::size_t chunk = piece_chunk_bytes(pager_chunk_bytes);
  HTP_EXPECTS(chunk > 0, invalid_argument, what, "('", name, "'): the pagers' chunk_bytes (",
              pager_chunk_bytes, ") cannot carry a codec chunk; use 4152 or more");
  codec_options o;
  o.chunk_bytes = chunk;
  o.threads = 0;  // automatic: every core for a large weight
  if (timing_only) {
    wire.clear();
    return std::make_shared<const coded_layout>(model_chunk_frames(bytes, format, chunk, ratio));
  }
  std::vector<std::uint8_t> zeros;
  if (src == nullptr) zeros.assign(bytes, 0);
  const auto frame = encode_weights(src != nullptr ? src : zeros.data(), bytes, format, o);
  wire = split_frame(parse_frame(frame.data(), frame.size()));
  return std::make_shared<const coded_layout>(verify_chunk_frames(wire.data(), wire.size()));
}

}  // namespace

node_tensor node::register_replicated_compressed(std::string name, std::size_t bytes,
                                                 weight_format format, const void* source) {
  HTP_EXPECTS(bytes > 0, invalid_argument, "node::register_replicated_compressed('", name,
              "', 0 bytes): a tensor needs a byte");
  std::size_t chunk = SIZE_MAX;  // the smallest pager chunk: its pieces fit every pager
  for (const auto& p : p_->pagers) chunk = std::min(chunk, p->config().chunk_bytes);
  record r;
  r.name = std::move(name);
  r.layout = node_layout::replicated;
  std::vector<std::uint8_t> wire;
  const std::vector<std::shared_ptr<const coded_layout>> layouts = {
      encode_sequence("node::register_replicated_compressed", r.name, bytes, format, source, chunk,
                      p_->devs[0]->properties().timing_only,
                      p_->pagers[0]->config().modelled_compression_ratio, wire)};
  p_->add_host_extent(r, 0, layouts[0]->wire_bytes, wire.empty() ? nullptr : wire.data());
  std::vector<std::pair<std::size_t, std::size_t>> where;
  for (std::size_t g = 0; g < p_->pagers.size(); ++g) where.emplace_back(g, 0);
  return p_->commit(std::move(r), where, tensor_kind::weight, &layouts);
}

node_tensor node::register_sharded(std::string name, const std::vector<std::size_t>& shard_bytes,
                                   tensor_kind kind, const std::vector<const void*>& sources) {
  const std::size_t n = p_->pagers.size();
  HTP_EXPECTS(shard_bytes.size() == n, invalid_argument, "node::register_sharded('", name,
              "'): ", shard_bytes.size(), " shard sizes for ", n, " GPUs; give one per GPU");
  HTP_EXPECTS(sources.empty() || sources.size() == n, invalid_argument, "node::register_sharded('",
              name, "'): ", sources.size(), " sources for ", n,
              " shards; give none or one per shard");
  for (std::size_t g = 0; g < n; ++g) {
    HTP_EXPECTS(shard_bytes[g] > 0, invalid_argument, "node::register_sharded('", name,
                "'): shard ", g, " has 0 bytes; every GPU's shard needs a byte");
  }
  record r;
  r.name = std::move(name);
  r.layout = node_layout::sharded;
  std::vector<std::pair<std::size_t, std::size_t>> where;
  try {
    for (std::size_t g = 0; g < n; ++g) {
      p_->add_host_extent(r, g, shard_bytes[g],
                          sources.empty() ? nullptr : sources[g]);  // GPU g's NUMA node
      where.emplace_back(g, g);
    }
  } catch (...) {
    p_->free_host(r);
    throw;
  }
  return p_->commit(std::move(r), where, kind);
}

node_tensor node::register_sharded_compressed(std::string name,
                                              const std::vector<std::size_t>& shard_bytes,
                                              weight_format format,
                                              const std::vector<const void*>& sources) {
  const std::size_t n = p_->pagers.size();
  HTP_EXPECTS(shard_bytes.size() == n && (sources.empty() || sources.size() == n), invalid_argument,
              "node::register_sharded_compressed('", name, "'): ", shard_bytes.size(),
              " shard sizes and ", sources.size(), " sources for ", n,
              " GPUs; give one size per GPU and none or one source per shard");
  record r;
  r.name = std::move(name);
  r.layout = node_layout::sharded;
  std::vector<std::pair<std::size_t, std::size_t>> where;
  std::vector<std::shared_ptr<const coded_layout>> layouts;
  try {
    for (std::size_t g = 0; g < n; ++g) {
      HTP_EXPECTS(shard_bytes[g] > 0, invalid_argument, "node::register_sharded_compressed('",
                  r.name, "'): shard ", g, " has 0 bytes");
      const pager_config& pc = p_->pagers[g]->config();
      std::vector<std::uint8_t> wire;
      layouts.push_back(encode_sequence("node::register_sharded_compressed", r.name, shard_bytes[g],
                                        format, sources.empty() ? nullptr : sources[g],
                                        pc.chunk_bytes, p_->devs[g]->properties().timing_only,
                                        pc.modelled_compression_ratio, wire));
      p_->add_host_extent(r, g, layouts.back()->wire_bytes, wire.empty() ? nullptr : wire.data());
      where.emplace_back(g, g);
    }
  } catch (...) {
    p_->free_host(r);
    throw;
  }
  return p_->commit(std::move(r), where, tensor_kind::weight, &layouts);
}

node_tensor node::register_local(std::size_t g, std::string name, std::size_t bytes,
                                 tensor_kind kind, const void* source) {
  HTP_EXPECTS(g < p_->pagers.size(), invalid_argument, "node::register_local(", g, ", '", name,
              "'): the node has ", p_->pagers.size(), " GPUs");
  HTP_EXPECTS(bytes > 0, invalid_argument, "node::register_local('", name,
              "', 0 bytes): a tensor needs a byte");
  record r;
  r.name = std::move(name);
  r.layout = node_layout::local;
  p_->add_host_extent(r, g, bytes, source);
  return p_->commit(std::move(r), {{g, 0}}, kind);
}

tensor_handle node::on(node_tensor t, std::size_t g) const {
  std::lock_guard lock(p_->mu);
  const record& r = p_->live_record(t, "on");
  HTP_EXPECTS(g < r.handles.size(), invalid_argument, "node::on('", r.name, "', ", g,
              "): the node has ", r.handles.size(), " GPUs");
  HTP_EXPECTS(
      static_cast<bool>(r.handles[g]), invalid_argument, "node::on('", r.name, "', ", g, "): the ",
      r.layout == node_layout::sharded ? "sharded tensor's shard for GPU "
                                       : "local tensor is not on GPU ",
      g, r.layout == node_layout::sharded ? " is not registered" : "", "; a ",
      r.layout == node_layout::sharded ? "shard" : "local tensor",
      " is paged only into its own GPU (use register_replicated for a weight every GPU reads)");
  return r.handles[g];
}

node_layout node::layout(node_tensor t) const {
  std::lock_guard lock(p_->mu);
  return p_->live_record(t, "layout").layout;
}

extent node::host_copy(node_tensor t, std::size_t shard) const {
  std::lock_guard lock(p_->mu);
  const record& r = p_->live_record(t, "host_copy");
  HTP_EXPECTS(shard < r.host.size(), invalid_argument, "node::host_copy('", r.name, "', ", shard,
              "): it has ", r.host.size(), " host cop", r.host.size() == 1 ? "y" : "ies");
  return r.host[shard];
}

void node::unregister(node_tensor t) {
  record r;
  {
    std::lock_guard lock(p_->mu);
    const record& cur = p_->live_record(t, "unregister");
    for (std::size_t g = 0; g < cur.handles.size(); ++g) {
      if (!cur.handles[g]) continue;
      const tensor_info info = p_->pagers[g]->info(cur.handles[g]);
      HTP_EXPECTS(info.pins == 0, invalid_argument, "node::unregister('", cur.name,
                  "'): still acquired ", info.pins, " time(s) on GPU ", g, "; release it first");
    }
    record& slot = p_->records[t.index];
    r = slot;
    slot.live = false;
    slot.host.clear();
    slot.handles.clear();
    p_->free_slots.push_back(t.index);
    for (std::size_t i = 0; i < r.host.size(); ++i) p_->hosts[r.tier[i]].used -= r.host[i].bytes;
    if (r.layout == node_layout::replicated) p_->replicated_bytes -= r.host.front().bytes;
    --p_->live;
  }
  // Outside the node's lock: unregistering waits for the tensor's copies.
  for (std::size_t g = 0; g < r.handles.size(); ++g) {
    if (r.handles[g]) p_->pagers[g]->unregister_tensor(r.handles[g]);
  }
  p_->free_host(r);
}

node_metrics node::metrics() const {
  node_metrics m;
  {
    std::lock_guard lock(p_->mu);
    m.replicated_bytes = p_->replicated_bytes;
    m.tensors = p_->live;
    for (std::size_t k = 0; k < p_->hosts.size(); ++k) {
      const host_tier& ht = p_->hosts[k];
      node_host_tier_metrics t;
      t.numa_node = ht.numa_node;
      t.placement = ht.placement;
      t.capacity_bytes = ht.alloc->capacity_bytes();
      t.used_bytes = ht.used;
      for (std::size_t g = 0; g < p_->tier_of.size(); ++g) {
        if (p_->tier_of[g] == k) t.gpus.push_back(g);
      }
      m.host_capacity_bytes += t.capacity_bytes;
      m.host_used_bytes += t.used_bytes;
      m.host_tiers.push_back(std::move(t));
    }
  }
  for (const auto& pg : p_->pagers) m.per_gpu.push_back(pg->metrics());
  std::lock_guard lock(p_->mu);  // link_baseline
  for (std::size_t i = 0; i < p_->links.entries.size(); ++i) {
    const detail::node_link_entry& e = p_->links.entries[i];
    node_link_metrics l;
    l.name = e.group.name;
    l.gpus = e.group.gpus;
    if (e.parent >= 0) l.parent = p_->links.entries[static_cast<std::size_t>(e.parent)].group.name;
    if (e.combined) {
      l.combined_rate_bytes_per_second = e.combined->rate();
      l.combined_bytes = p_->since_reset(i, 0, e.combined->bytes_taken());
    }
    if (e.h2d) {
      l.h2d_rate_bytes_per_second = e.h2d->rate();
      l.h2d_bytes = p_->since_reset(i, 1, e.h2d->bytes_taken());
    }
    if (e.d2h) {
      l.d2h_rate_bytes_per_second = e.d2h->rate();
      l.d2h_bytes = p_->since_reset(i, 2, e.d2h->bytes_taken());
    }
    m.links.push_back(std::move(l));
  }
  return m;
}

void node::reset_metrics() {
  for (const auto& pg : p_->pagers) pg->reset_metrics();
  std::lock_guard lock(p_->mu);
  p_->link_baseline.assign(p_->links.entries.size(), {});
  for (std::size_t i = 0; i < p_->links.entries.size(); ++i) {
    const detail::node_link_entry& e = p_->links.entries[i];
    if (e.combined) p_->link_baseline[i][0] = e.combined->bytes_taken();
    if (e.h2d) p_->link_baseline[i][1] = e.h2d->bytes_taken();
    if (e.d2h) p_->link_baseline[i][2] = e.d2h->bytes_taken();
  }
}

std::vector<std::shared_ptr<shared_link>> node::shared_links() const {
  std::vector<std::shared_ptr<shared_link>> out;
  for (const detail::node_link_entry& e : p_->links.entries) {
    if (e.h2d) out.push_back(e.h2d);
    if (e.d2h) out.push_back(e.d2h);
    if (e.combined) out.push_back(e.combined);
  }
  return out;
}

}  // namespace htp
