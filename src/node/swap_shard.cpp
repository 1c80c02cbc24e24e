// Swap-and-shard: see include/htp/swap_shard.hpp, Note [Swap-and-shard].
#include <htp/swap_shard.hpp>

#include <htp/detail/check.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>

namespace htp {

namespace {

/// One GPU's buffers, streams and events. Visit v (the v-th acquire on this GPU) uses layer
/// order[v % order.size()], in group q = v / layers_per_sync, held in buffer q % ahead at position
/// v % layers_per_sync.
struct gpu_state {
  std::unique_ptr<stream> gather;
  std::vector<tensor_handle> buffer_tensor;  // device-resident tensors of this GPU's pager
  std::vector<void*> buffer;
  std::vector<event_ref> ready, released;
  std::size_t issued = 0;     // groups whose gathers are enqueued
  std::size_t next = 0;       // the next visit to acquire
  bool holding = false;       // visit next - 1 acquired and not released
  stream_ref waited_on;       // the compute stream that waited for the current group's event
  std::size_t pinned = 0;     // buffers acquired (for teardown after a partial construction)
  std::uint64_t gathers = 0;  // all-gathers enqueued (probe included): every rank's must match
  bool stopped = false;       // stop(): nothing more is gathered, the buffers hold no usable layer
  /// Host path: events recorded on the gather stream once a buffer is free, handed to the engine as
  /// the loads' `after` fence. An engine fence must not be re-recorded before its requests finish,
  /// so each is reused only when they have (a pool, not one event per buffer).
  struct gate {
    event_ref ev;
    std::vector<transfer_ticket> loads;
  };
  std::vector<gate> gates;
};

}  // namespace

struct swap_shard::impl {
  node& n;
  collectives& coll;
  swap_shard_config cfg;
  std::vector<std::size_t> bytes;  // per layer, as given
  std::vector<std::size_t> order;  // the visit order (cfg.order, or every layer once)
  std::size_t shard = 0;           // bytes per shard (the largest layer / N, rounded up)
  std::vector<node_tensor> layer;  // sharded
  std::vector<layer_source> src;
  std::vector<gpu_state> gpus;
  mutable std::mutex mu;  // metrics
  swap_shard_metrics m;

  impl(node& nd, collectives& c, swap_shard_config config) : n(nd), coll(c), cfg(config) {}
  /// The source of every layer (see Note [Swap-and-shard]); records the rates in m.
  layer_source plan_sources(std::size_t layers);
  /// Times a probe all-gather over every rank: the per-GPU interconnect rate, bytes per second.
  std::uint64_t measure_interconnect();
  /// Waits for every gather, releases and drops the buffers, unregisters the layers; copes with a
  /// partly built object. Never throws.
  void teardown() noexcept;
  /// GPU g: cancels the host loads not yet issued (their value words are written, so the gather
  /// stream's waits on them pass), then waits on the host until the gather stream is idle.
  void stop(std::size_t g);
  /// Aborts the collectives if the ranks' all-gathers do not match (a rank issued more than
  /// another: its extra gathers would wait forever). Never throws.
  void abort_unmatched_gathers() noexcept;

  /// The layer of visit v.
  std::size_t layer_at(std::size_t v) const { return order[v % order.size()]; }

  /// A gate event of GPU g whose earlier loads have all finished (or a new one).
  gpu_state::gate& free_gate(std::size_t g) {
    gpu_state& st = gpus[g];
    transfer_engine& e = n.gpu(g).engine();
    for (gpu_state::gate& gt : st.gates) {
      const bool done = std::all_of(gt.loads.begin(), gt.loads.end(), [&](transfer_ticket t) {
        const transfer_status x = e.status(t);
        return x != transfer_status::queued && x != transfer_status::in_flight;
      });
      if (done) return gt;
    }
    st.gates.push_back({n.device_of(g).create_event(), {}});
    return st.gates.back();
  }

  /// Enqueues the gathers of group q on GPU g's gather stream, then the group's ready event.
  void issue(std::size_t g, std::size_t q) {
    gpu_state& st = gpus[g];
    const std::size_t b = q % cfg.ahead;
    device& dev = n.device_of(g);
    const stream_ref gs = *st.gather;
    const std::size_t N = n.gpu_count();
    if (q >= cfg.ahead) dev.wait(st.released[b], gs);  // the buffer's previous group is done
    gpu_state::gate* gt = nullptr;                     // host path: one fence for the group's loads
    std::uint64_t peers = 0, hosts = 0;
    const std::size_t k = cfg.layers_per_sync;
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t l = layer_at(q * k + j);
      char* at = static_cast<char*>(st.buffer[b]) + j * N * shard;
      if (src[l] == layer_source::peers) {
        pager& p = n.gpu(g);
        const tensor_handle h = n.on(layer[l], g);
        const device_span own = p.acquire(h, gs);  // pages the shard in if it is not in HBM
        try {
          coll.all_gather(g, own.data, at, shard, gs);
          ++st.gathers;
        } catch (...) {
          p.release(h, gs);  // the shard is not left pinned
          throw;
        }
        p.release(h, gs);
        ++peers;
      } else {
        transfer_engine& e = n.gpu(g).engine();
        if (gt == nullptr) {
          gt = &free_gate(g);
          dev.record(gt->ev, gs);  // passes once the buffer is free (the wait above)
          gt->loads.clear();
        }
        for (std::size_t r = 0; r < N; ++r) {
          const extent hc = n.host_copy(layer[l], r);
          gt->loads.push_back(e.submit(at + r * shard, hc.ptr, shard,
                                       copy_direction::host_to_device, transfer_priority::prefetch,
                                       {gt->ev}));
          e.wait_on(gt->loads.back(), gs);
        }
        ++hosts;
      }
    }
    dev.record(st.ready[b], gs);
    std::lock_guard lock(mu);
    m.gathers += peers + hosts;
    m.peer_gathers += peers;
    m.host_loads += hosts;
    m.gathered_bytes += (peers + hosts) * N * shard;
  }
};

swap_shard::swap_shard(node& nd, collectives& c, const std::vector<std::size_t>& layer_bytes,
                       const std::vector<const void*>& layer_sources, swap_shard_config config)
    : p_(std::make_unique<impl>(nd, c, config)) {
  impl& s = *p_;
  const std::size_t N = nd.gpu_count();
  HTP_EXPECTS(!layer_bytes.empty(), invalid_argument, "swap_shard: no layers");
  HTP_EXPECTS(layer_sources.empty() || layer_sources.size() == layer_bytes.size(), invalid_argument,
              "swap_shard: ", layer_sources.size(), " sources for ", layer_bytes.size(),
              " layers; give none or one per layer");
  HTP_EXPECTS(c.size() == N, invalid_argument, "swap_shard: the collectives have ", c.size(),
              " ranks and the node ", N, " GPUs");
  HTP_EXPECTS(config.ahead >= 1, invalid_argument,
              "swap_shard_config.ahead is 0; at least one buffer is needed (2 = double buffering)");
  HTP_EXPECTS(config.layers_per_sync >= 1, invalid_argument,
              "swap_shard_config.layers_per_sync is 0; give 1 (a synchronisation per layer) or "
              "more (2 = once per two layers)");
  for (std::size_t l = 0; l < layer_bytes.size(); ++l) {
    HTP_EXPECTS(layer_bytes[l] > 0, invalid_argument, "swap_shard: layer ", l, " has 0 bytes");
  }
  for (std::size_t v = 0; v < config.order.size(); ++v) {
    HTP_EXPECTS(config.order[v] < layer_bytes.size(), invalid_argument, "swap_shard_config.order[",
                v, "] is layer ", config.order[v], " of ", layer_bytes.size(),
                "; every entry must name a layer (or leave order empty)");
  }
  s.bytes = layer_bytes;
  s.order = config.order;
  if (s.order.empty()) {
    for (std::size_t l = 0; l < layer_bytes.size(); ++l) s.order.push_back(l);
  }
  const std::size_t largest = *std::max_element(layer_bytes.begin(), layer_bytes.end());
  s.shard = (largest + N - 1) / N;
  s.shard =
      (s.shard + device::alignment - 1) / device::alignment * device::alignment;  // aligned offsets

  try {
    for (std::size_t g = 0; g < N; ++g) {
      s.gpus.emplace_back();
      gpu_state& st = s.gpus.back();
      device& dev = nd.device_of(g);
      pager& p = nd.gpu(g);
      st.gather = std::make_unique<stream>(dev);
      for (std::size_t b = 0; b < config.ahead; ++b) {
        // HBM only: a staging buffer is rewritten by every gather and never needs a host copy.
        st.buffer_tensor.push_back(p.register_resident("staging" + std::to_string(b),
                                                       config.layers_per_sync * N * s.shard,
                                                       tensor_kind::mutable_state));
        st.buffer.push_back(p.acquire(st.buffer_tensor.back(), *st.gather).data);  // held for life
        ++st.pinned;
        st.ready.push_back(dev.create_event());
        st.released.push_back(dev.create_event());
      }
    }
    const layer_source plan = s.plan_sources(layer_bytes.size());
    std::vector<unsigned char> padded;
    for (std::size_t l = 0; l < layer_bytes.size(); ++l) {
      std::vector<const void*> shard_src;
      if (!layer_sources.empty() && layer_sources[l] != nullptr &&
          !nd.device_of(0).properties().timing_only) {
        padded.assign(N * s.shard, 0);
        std::memcpy(padded.data(), layer_sources[l], layer_bytes[l]);
        for (std::size_t k = 0; k < N; ++k) shard_src.push_back(padded.data() + k * s.shard);
      }
      s.layer.push_back(nd.register_sharded("layer" + std::to_string(l),
                                            std::vector<std::size_t>(N, s.shard),
                                            tensor_kind::weight, shard_src));
      s.src.push_back(plan);
      ++(plan == layer_source::peers ? s.m.layers_from_peers : s.m.layers_from_host);
    }
  } catch (...) {
    s.teardown();  // nothing made so far stays behind
    throw;
  }
}

layer_source swap_shard::impl::plan_sources(std::size_t layers) {
  const std::size_t N = n.gpu_count();
  std::size_t smallest_hbm = SIZE_MAX;
  for (std::size_t g = 0; g < N; ++g)
    smallest_hbm = std::min(smallest_hbm, n.gpu(g).config().hbm_budget_bytes);
  const std::size_t staging = cfg.ahead * cfg.layers_per_sync * N * shard;
  if (shard * layers + staging <= smallest_hbm)
    return layer_source::peers;           // every shard stays in HBM
  if (N == 1) return layer_source::host;  // a one-rank gather would only add a copy
  const std::uint64_t host = cfg.host_bytes_per_second > 0
                                 ? cfg.host_bytes_per_second
                                 : n.gpu(0).engine().metrics().h2d.effective_rate();
  const std::uint64_t ic = cfg.interconnect_bytes_per_second > 0 ? cfg.interconnect_bytes_per_second
                                                                 : measure_interconnect();
  m.host_bytes_per_second = host;
  m.interconnect_bytes_per_second = ic;
  m.interconnect_measured = cfg.interconnect_bytes_per_second == 0;
  // Seconds per layer: peers page the own shard in (1 over the host link) and gather N - 1 over
  // the interconnect; host loads all N over the host link.
  const double peers = 1.0 / double(host) + double(N - 1) / double(ic);
  const double from_host = double(N) / double(host);
  return peers < from_host ? layer_source::peers : layer_source::host;
}

std::uint64_t swap_shard::impl::measure_interconnect() {
  const std::size_t N = n.gpu_count();
  // In place in staging buffer 0 (rank r sends its slot), which holds N shards or more.
  const std::size_t probe = std::max<std::size_t>(
      device::alignment, std::min(cfg.probe_bytes, shard) / device::alignment * device::alignment);
  double best_s = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      coll.group_start();
      // group_end even when a call throws: NCCL keeps the group open otherwise, and an abort of
      // the collectives waits for open groups.
      struct group_guard {
        collectives& c;
        bool ended = false;
        ~group_guard() {
          if (!ended) {
            try {
              c.group_end();
            } catch (...) {  // already failing: the first error is the one thrown
            }
          }
        }
      } guard{coll};
      for (std::size_t g = 0; g < N; ++g) {
        char* recv = static_cast<char*>(gpus[g].buffer[0]);
        coll.all_gather(g, recv + g * probe, recv, probe, gpus[g].gather->ref());
        ++gpus[g].gathers;
      }
      guard.ended = true;
      coll.group_end();
    }
    for (std::size_t g = 0; g < N; ++g) gpus[g].gather->synchronize();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep == 0 || sec < best_s) best_s = sec;
  }
  const double rate = double(N - 1) * double(probe) / std::max(best_s, 1e-9);
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(rate));
}

swap_shard::~swap_shard() { p_->teardown(); }

std::vector<std::size_t> forward_backward_order(std::size_t layers) {
  std::vector<std::size_t> v;
  v.reserve(2 * layers);
  for (std::size_t l = 0; l < layers; ++l) v.push_back(l);
  for (std::size_t l = layers; l-- > 0;) v.push_back(l);
  return v;
}

void swap_shard::impl::stop(std::size_t g) {
  gpu_state& st = gpus[g];
  st.stopped = true;
  if (!st.gather) return;
  transfer_engine& e = n.gpu(g).engine();
  for (const gpu_state::gate& gt : st.gates) {
    for (transfer_ticket t : gt.loads)
      e.cancel(t);  // false for loads already issued: they complete
  }
  st.gather->synchronize();
}

void swap_shard::impl::abort_unmatched_gathers() noexcept {
  if (gpus.empty() || coll.aborted()) return;
  std::uint64_t least = UINT64_MAX, most = 0;
  for (const gpu_state& st : gpus) {
    least = std::min(least, st.gathers);
    most = std::max(most, st.gathers);
  }
  if (least == most) return;
  try {
    std::string counts;
    for (std::size_t g = 0; g < gpus.size(); ++g) {
      counts += detail::concat(g == 0 ? "" : ", ", "GPU ", g, ": ", gpus[g].gathers);
    }
    coll.abort(detail::concat("swap_shard destroyed with all-gathers no other rank matches (",
                              counts,
                              "); every GPU must make the same acquires before it is destroyed"));
  } catch (...) {
    coll.abort("swap_shard destroyed with all-gathers no other rank matches");
  }
}

void swap_shard::impl::teardown() noexcept {
  impl& s = *this;
  // Before anything is freed or released on any GPU (a free may synchronise the device), no
  // gather stream may still wait for work a host thread has yet to issue: unmatched gathers are
  // aborted, queued host loads cancelled, every gather stream drained.
  s.abort_unmatched_gathers();
  for (std::size_t g = 0; g < s.gpus.size(); ++g) {
    try {
      s.stop(g);
    } catch (...) {
      // A device error at teardown: the node drops what is left when it goes.
    }
  }
  for (std::size_t g = 0; g < s.gpus.size(); ++g) {
    gpu_state& st = s.gpus[g];
    try {
      if (st.gather) {
        // The compute streams' last uses of the buffers end before their memory goes back.
        for (event_ref e : st.released) s.n.device_of(g).synchronize(e);
        for (std::size_t b = 0; b < st.pinned; ++b)
          s.n.gpu(g).release(st.buffer_tensor[b], *st.gather);
        st.gather->synchronize();
      }
      for (tensor_handle t : st.buffer_tensor) s.n.gpu(g).unregister_tensor(t);
    } catch (...) {
      // A device error at teardown: the node drops what is left when it goes.
    }
    device& dev = s.n.device_of(g);
    for (event_ref e : st.ready) dev.destroy_event(e);
    for (event_ref e : st.released) dev.destroy_event(e);
    for (const gpu_state::gate& gt : st.gates) dev.destroy_event(gt.ev);
  }
  s.gpus.clear();
  for (node_tensor t : s.layer) {
    try {
      s.n.unregister(t);
    } catch (...) {
    }
  }
  s.layer.clear();
}

void swap_shard::stop(std::size_t g) {
  impl& s = *p_;
  HTP_EXPECTS(g < s.gpus.size(), invalid_argument, "swap_shard::stop: GPU ", g, " of ",
              s.gpus.size());
  s.stop(g);
}

std::size_t swap_shard::layers() const noexcept { return p_->layer.size(); }

layer_source swap_shard::source(std::size_t layer) const {
  HTP_EXPECTS(layer < p_->layer.size(), invalid_argument, "swap_shard::source(", layer,
              "): ", p_->layer.size(), " layers");
  return p_->src[layer];
}

device_span swap_shard::acquire(std::size_t g, std::size_t layer, stream_ref compute) {
  impl& s = *p_;
  HTP_EXPECTS(g < s.gpus.size(), invalid_argument, "swap_shard::acquire: GPU ", g, " of ",
              s.gpus.size());
  gpu_state& st = s.gpus[g];
  HTP_EXPECTS(!st.stopped, logic_error, "swap_shard::acquire(GPU ", g, ", layer ", layer, "): GPU ",
              g, " was stopped (swap_shard::stop); its staging buffers hold no usable layer");
  const std::size_t expected = s.layer_at(st.next);
  HTP_EXPECTS(layer == expected && !st.holding, invalid_argument, "swap_shard::acquire(GPU ", g,
              ", layer ", layer, "): ",
              st.holding ? "the previous layer is not released yet"
                         : "layers come in the visit order; the next one on this GPU is " +
                               std::to_string(expected));
  const std::size_t k = s.cfg.layers_per_sync;
  const std::size_t q = st.next / k, b = q % s.cfg.ahead, j = st.next % k;
  // Keep `ahead` groups in flight: this one and the next, whose buffers are released.
  for (; st.issued < q + s.cfg.ahead; ++st.issued) s.issue(g, st.issued);
  HTP_EXPECTS(j == 0 || compute == st.waited_on, invalid_argument, "swap_shard::acquire(GPU ", g,
              ", layer ", layer,
              "): the layers of a group (swap_shard_config.layers_per_sync = ", k,
              ") are acquired on one compute stream; this one differs from the group's first");
  const bool wait = j == 0;  // once per group
  if (wait) {
    s.n.device_of(g).wait(st.ready[b], compute);
    st.waited_on = compute;
  }
  const device_span span{static_cast<char*>(st.buffer[b]) + j * s.n.gpu_count() * s.shard,
                         s.bytes[layer], false};
  ++st.next;
  st.holding = true;
  std::lock_guard lock(s.mu);
  ++s.m.layers_acquired;
  if (wait) ++s.m.compute_waits;
  return span;
}

void swap_shard::release(std::size_t g, std::size_t layer, stream_ref compute) {
  impl& s = *p_;
  HTP_EXPECTS(g < s.gpus.size(), invalid_argument, "swap_shard::release: GPU ", g, " of ",
              s.gpus.size());
  gpu_state& st = s.gpus[g];
  HTP_EXPECTS(st.holding && layer == s.layer_at(st.next - 1), invalid_argument,
              "swap_shard::release(GPU ", g, ", layer ", layer, "): not the layer this GPU holds");
  // A marker, not a synchronisation: the buffer's next gather waits on it once, after the group's
  // last layer (a later record on the same stream covers the earlier ones).
  s.n.device_of(g).record(st.released[((st.next - 1) / s.cfg.layers_per_sync) % s.cfg.ahead],
                          compute);
  st.holding = false;
}

swap_shard_metrics swap_shard::metrics() const {
  std::lock_guard lock(p_->mu);
  return p_->m;
}

}  // namespace htp
