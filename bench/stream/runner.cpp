// Runs one policy of the streaming benchmark. See runner.hpp.
#include "runner.hpp"

#include "shared/belady_min.hpp"
#include "shared/htp_layout.hpp"

#include "common/synthetic_weights.hpp"

#include <htp/checksum.hpp>
#include <htp/detail/check.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <random>

namespace htp::bench {
namespace {

using clock_type = std::chrono::steady_clock;

/// The expert a tensor belongs to (its name holds "expert" then an index), or -1 for shared ones.
int expert_of(const std::string& name) {
  const auto at = name.find("expert");
  if (at == std::string::npos) return -1;
  std::size_t i = at + 6;
  while (i < name.size() && !std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == name.size()) return -1;
  return std::atoi(name.c_str() + i);
}

double median(std::vector<double> v) { return summarize(std::move(v)).p50; }

std::uint64_t kv_bytes_per_token(const bench_config& cfg) {
  const auto& m = cfg.model;
  const std::uint64_t head_dim = static_cast<std::uint64_t>(m.hidden / m.heads);
  return 2ull * static_cast<std::uint64_t>(m.kv_heads) * head_dim * bytes_per_element(cfg.type);
}

/// The registered model: per layer, shared tensors and per-expert tensors, with checksums.
struct model_instance {
  struct tensor {
    tensor_handle h;
    std::uint64_t rows, cols, sum, head, tail;
  };
  struct layer {
    std::vector<tensor> shared;
    std::vector<std::vector<tensor>> experts;
    std::vector<tensor_handle> kv;  // blocks, oldest first
  };
  std::vector<layer> layers;
};

}  // namespace

summary_ms summarize(std::vector<double> v) {
  summary_ms s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    return v[std::min(
        v.size() - 1,
        static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - (q > 0 ? 1 : 0))];
  };
  s.p50 = at(0.5);
  s.p99 = at(0.99);
  s.p999 = at(0.999);
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

std::vector<policy> standard_policies() {
  return {
      {"all-resident", eviction_rule::automatic, 2, true, false, true},
      {"on-demand", eviction_rule::lru, 0, false, true, false},
      {"lru+lookahead2", eviction_rule::lru, 2, true, false, false},
      {"schedule-k1", eviction_rule::automatic, 1, true, false, false},
      {"schedule-k2", eviction_rule::automatic, 2, true, false, false},
      {"schedule-auto", eviction_rule::automatic, 2, true, false, false,
       prefetch_mode::min_page_ins, lookahead_mode::automatic},
  };
}

std::uint64_t streamed_weight_bytes(const bench_config& cfg) {
  return static_cast<std::uint64_t>(cfg.layers) * layer_parameters(cfg.model) *
         bytes_per_element(cfg.type);
}

std::uint64_t largest_layer_bytes(const bench_config& cfg) {
  std::uint64_t shared = 0;
  std::vector<std::uint64_t> experts(static_cast<std::size_t>(std::max(1, cfg.model.experts)), 0);
  for (const auto& t : layer_tensors(cfg.model)) {
    const int e = expert_of(t.name);
    const std::uint64_t b = t.rows * t.cols * bytes_per_element(cfg.type);
    if (e < 0) {
      shared += b;
    } else {
      experts[static_cast<std::size_t>(e) % experts.size()] += b;
    }
  }
  std::sort(experts.rbegin(), experts.rend());
  for (int k = 0; k < cfg.model.experts_per_token && cfg.model.experts > 1; ++k)
    shared += experts[static_cast<std::size_t>(k)];
  return shared;
}

std::uint64_t kv_bytes_at_end(const bench_config& cfg) {
  if (cfg.kv_context_tokens <= 0) return 0;
  const std::uint64_t tokens = static_cast<std::uint64_t>(cfg.kv_context_tokens) +
                               static_cast<std::uint64_t>(cfg.tokens) *
                                   static_cast<std::uint64_t>(cfg.steps + cfg.warmup_steps);
  const std::uint64_t blocks = (tokens + static_cast<std::uint64_t>(cfg.kv_block_tokens) - 1) /
                               static_cast<std::uint64_t>(cfg.kv_block_tokens);
  return blocks * static_cast<std::uint64_t>(cfg.kv_block_tokens) * kv_bytes_per_token(cfg) *
         static_cast<std::uint64_t>(cfg.layers);
}

void undilate(policy_result& r, double scale) {
  if (scale == 1) return;
  const auto shrink = [scale](summary_ms& x) {
    x.p50 /= scale;
    x.p99 /= scale;
    x.p999 /= scale;
    x.max /= scale;
    x.mean /= scale;
  };
  for (double& x : r.step_ms) x /= scale;
  shrink(r.step);
  shrink(r.fault);
  shrink(r.stall);
  for (double* x : {&r.fault_wait.p50_ms, &r.fault_wait.p90_ms, &r.fault_wait.p99_ms,
                    &r.fault_wait.max_ms, &r.fault_wait.mean_ms, &r.fault_wait.ms_per_64mib_page,
                    &r.stall_ms_per_step, &r.bound_ms, &r.compute_ms, &r.transfer_ms,
                    &r.wire_bound_ms, &r.decode_ms_per_step, &r.bound_lower_ms}) {
    *x /= scale;
  }
  r.fault_rate_per_ms *= scale;
  r.h2d_gbps *= scale;
  r.effective_logical_gbps *= scale;
  r.meets_budget = r.step.p99 <= r.latency_budget_ms;
}

host_weights::host_weights(device& dev, const bench_config& cfg) : dev_(dev) {
  const auto shapes = layer_tensors(cfg.model);
  per_layer_ = shapes.size();
  const bool timing_only = dev.properties().timing_only;
  const std::size_t align = std::size_t{64} << 10;  // each tensor on its own pages
  std::vector<std::size_t> offsets;
  for (int l = 0; l < cfg.layers; ++l) {
    for (const auto& t : shapes) {
      const std::size_t bytes = t.rows * t.cols * bytes_per_element(cfg.type);
      offsets.push_back(bytes_);
      entries_.push_back({nullptr, bytes, {}});
      bytes_ += (bytes + align - 1) / align * align;
    }
  }
  if (timing_only || bytes_ == 0) return;
  block_ = dev.allocate(memory_kind::pinned_host, bytes_);
  for (std::size_t k = 0; k < entries_.size(); ++k) {
    entry& e = entries_[k];
    const std::size_t l = k / per_layer_, i = k % per_layer_;
    const std::uint64_t seed = cfg.seed * 1'000'003 + static_cast<std::uint64_t>(l) * 4096 + i;
    e.data = static_cast<unsigned char*>(block_) + offsets[k];
    if (cfg.synthetic_weights) {
      const weight_format f = cfg.type == dtype::fp16 ? weight_format::fp16 : weight_format::bf16;
      const auto w = synthetic::llama_mixture((e.bytes + 1) / 2, f, seed);
      std::memcpy(e.data, w.data(), e.bytes);
    } else {
      fill_pattern(e.data, e.bytes, seed);
    }
    e.sums = sums_of(e.data, e.bytes);
  }
}

host_weights::~host_weights() {
  if (block_ != nullptr) dev_.deallocate(memory_kind::pinned_host, block_, bytes_);
}

namespace {

/// The HBM a policy's pager gets: the budget as given, in whole pages; all-resident: the whole
/// model, page-rounded as htp stores it (so it really holds everything), twice the KV cache and
/// two slabs, in whole slabs.
std::size_t policy_hbm_budget(const bench_config& cfg, const policy& pol,
                              std::uint64_t rounded_model) {
  const std::size_t slab = cfg.slab_bytes;
  if (!pol.all_resident) return cfg.hbm_budget_bytes / cfg.page_bytes * cfg.page_bytes;
  return (rounded_model + kv_bytes_at_end(cfg) * 2 + 2 * slab + slab - 1) / slab * slab;
}

/// The weights of cfg's layers as htp stores them (every tensor page-rounded).
std::uint64_t rounded_model_bytes(const bench_config& cfg) {
  std::uint64_t rounded = 0;
  for (const auto& t : layer_tensors(cfg.model)) {
    const std::uint64_t b = t.rows * t.cols * bytes_per_element(cfg.type);
    rounded += htp_tensor_bytes(b, cfg.page_bytes);
  }
  return rounded * static_cast<std::uint64_t>(cfg.layers);
}

/// The pager configuration of one policy with `hbm_budget` bytes of HBM; its host tier holds what
/// the KV cache writes back (and the weights too when `weights` has no bytes: timing-only).
pager_config policy_pager_config(const bench_config& cfg, const policy& pol, std::size_t hbm_budget,
                                 std::uint64_t rounded_model, const host_weights& weights,
                                 bool trace) {
  const std::size_t slab = cfg.slab_bytes;
  const auto round_slabs = [&](std::uint64_t b) { return (b + slab - 1) / slab * slab; };
  const std::uint64_t kv_end = kv_bytes_at_end(cfg);
  pager_config pc;
  pc.hbm_budget_bytes = hbm_budget;
  // The weights live in `weights` (lent to the pager); the host tier holds what the KV cache writes
  // back.
  pc.host_budget_bytes = round_slabs(kv_end * 2 + 4 * slab);
  if (weights.block() == nullptr || cfg.compress)
    pc.host_budget_bytes += round_slabs(rounded_model);  // timing-only, or compressed copies
  pc.modelled_compression_ratio = cfg.modelled_compression_ratio;
  pc.slab_bytes = slab;
  pc.page_bytes = cfg.page_bytes;
  pc.chunk_bytes = cfg.chunk_bytes;
  pc.h2d.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  pc.d2h.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  if (cfg.rate_bytes_per_second) {
    pc.h2d.rate_bytes_per_second = *cfg.rate_bytes_per_second;
    pc.d2h.rate_bytes_per_second = *cfg.rate_bytes_per_second;
  } else {
    pc.h2d.unlimited = true;
    pc.d2h.unlimited = true;
  }
  pc.lookahead = pol.mode;
  pc.prefetch_lookahead = pol.lookahead;
  pc.eviction = pol.rule;
  pc.prefetch = pol.prefetch;
  pc.latency_budget = cfg.latency_budget;
  pc.trace = trace;
  return pc;
}

/// Registers cfg's layers with `p`, each tensor at its bytes in `weights` (payloads from a seed,
/// so the compute can verify every byte it reads), or without bytes on a timing-only device.
model_instance register_model(pager& p, const bench_config& cfg, const host_weights& weights) {
  model_instance inst;
  const auto shapes = layer_tensors(cfg.model);
  for (int l = 0; l < cfg.layers; ++l) {
    model_instance::layer layer;
    layer.experts.resize(static_cast<std::size_t>(std::max(1, cfg.model.experts)));
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const auto& t = shapes[i];
      const host_weights::entry& w = weights.at(l, i);
      const weight_sums ws = w.sums;
      const std::string name = "L" + std::to_string(l) + "." + t.name;
      const weight_format f = cfg.type == dtype::fp16 ? weight_format::fp16 : weight_format::bf16;
      const auto h = cfg.compress ? p.register_tensor(name, w.bytes, tensor_kind::weight, w.data, f)
                     : w.data != nullptr
                         ? p.register_tensor_at(name, w.bytes, tensor_kind::weight, w.data)
                         : p.register_tensor(name, w.bytes, tensor_kind::weight, nullptr);
      model_instance::tensor rec{h, t.rows, t.cols, ws.sum, ws.head, ws.tail};
      const int e = expert_of(t.name);
      if (e < 0) {
        layer.shared.push_back(rec);
      } else {
        layer.experts[static_cast<std::size_t>(e) % layer.experts.size()].push_back(rec);
      }
    }
    inst.layers.push_back(std::move(layer));
  }
  return inst;
}

/// The schedule: dense models, every weight in layer order; MoE, the shared tensors only (which
/// experts a token routes to is not known ahead), so experts fault or hit.
std::vector<tensor_handle> schedule_of(const model_instance& inst, const bench_config& cfg) {
  std::vector<tensor_handle> sched;
  for (const auto& layer : inst.layers) {
    for (const auto& t : layer.shared) sched.push_back(t.h);
    if (cfg.model.experts <= 1) {
      for (const auto& t : layer.experts[0]) sched.push_back(t.h);
    }
  }
  return sched;
}

/// One policy's run in progress: its pager, compute stream, model and KV cache, and what the
/// timed steps have measured so far.
struct policy_run {
  device& dev;
  const bench_config& cfg;
  const policy& pol;
  layer_compute& compute;
  pager& p;
  stream& cs;
  model_instance inst;
  bool timing_only = false;
  std::size_t kv_block_bytes = 0;
  int kv_tokens = 0;
  std::mt19937_64 route;
  std::vector<double> compute_ms, transfer_ms, overlap;
  double stall_ms = 0;
  std::vector<double> stalls;           // acquires that stalled the compute stream, ms each
  bool record = false;                  // record the weight acquires of this step
  std::vector<tensor_handle> realised;  // the weights acquired in the first timed step, in order

  /// Registers KV blocks until every layer has room for kv_tokens (none without a KV cache).
  void add_kv_blocks() {
    if (cfg.kv_context_tokens <= 0) return;
    const std::size_t want =
        (static_cast<std::size_t>(kv_tokens) + static_cast<std::size_t>(cfg.kv_block_tokens) - 1) /
        static_cast<std::size_t>(cfg.kv_block_tokens);
    for (int l = 0; l < cfg.layers; ++l) {
      auto& kv = inst.layers[static_cast<std::size_t>(l)].kv;
      while (kv.size() < want) {
        kv.push_back(p.register_tensor("L" + std::to_string(l) + ".kv" + std::to_string(kv.size()),
                                       kv_block_bytes, tensor_kind::mutable_state));
      }
    }
  }
};

/// The weights one layer uses this step: its shared tensors, then its experts (MoE: the routed
/// experts_per_token of them, drawn from r.route).
std::vector<model_instance::tensor*> weights_in_use(policy_run& r, model_instance::layer& layer) {
  std::vector<model_instance::tensor*> use;
  for (auto& t : layer.shared) use.push_back(&t);
  if (r.cfg.model.experts > 1) {
    std::vector<int> ids(static_cast<std::size_t>(r.cfg.model.experts));
    for (int e = 0; e < r.cfg.model.experts; ++e) ids[static_cast<std::size_t>(e)] = e;
    std::shuffle(ids.begin(), ids.end(), r.route);
    for (int k = 0; k < r.cfg.model.experts_per_token; ++k) {
      for (auto& t : layer.experts[static_cast<std::size_t>(ids[static_cast<std::size_t>(k)])])
        use.push_back(&t);
    }
  } else {
    for (auto& t : layer.experts[0]) use.push_back(&t);
  }
  return use;
}

/// The layer's weights in use acquired and run, as a runner does: module granularity, each weight
/// acquired just before its kernel and released once it is enqueued, so only the weight in use is
/// pinned and eviction may choose any other; layer granularity, all of them in ONE acquire(list)
/// before the first kernel and one release(list) after the last. Stall marks wrap each acquire:
/// only htp's waits run between them on the compute stream. The first kernel also reads `kv`.
void run_layer_weights(policy_run& r, const std::vector<model_instance::tensor*>& use,
                       const std::vector<weight_view>& kv) {
  const auto view = [&](model_instance::tensor* t, const device_span& s) {
    return weight_view{s, t->rows, t->cols, t->sum, t->head, t->tail, !r.timing_only};
  };
  if (r.record) {
    for (auto* t : use) r.realised.push_back(t->h);
  }
  if (r.cfg.layer_lists) {
    std::vector<tensor_handle> hs;
    for (auto* t : use) hs.push_back(t->h);
    r.compute.begin_stall(r.cs);
    const auto spans = r.p.acquire(hs, r.cs, r.pol.wait_each_fault);
    r.compute.end_stall(r.cs);
    for (std::size_t w = 0; w < use.size(); ++w) {
      std::vector<weight_view> views{view(use[w], spans[w])};
      if (w == 0) views.insert(views.end(), kv.begin(), kv.end());
      r.compute.run_layer(views, r.cfg.tokens, r.cs);
    }
    r.p.release(hs, r.cs);
    return;
  }
  for (std::size_t w = 0; w < use.size(); ++w) {
    model_instance::tensor* t = use[w];
    r.compute.begin_stall(r.cs);
    const auto s = r.p.acquire(t->h, r.cs, r.pol.wait_each_fault);
    r.compute.end_stall(r.cs);
    std::vector<weight_view> views{view(t, s)};
    if (w == 0) views.insert(views.end(), kv.begin(), kv.end());
    r.compute.run_layer(views, r.cfg.tokens, r.cs);
    r.p.release(t->h, r.cs);
  }
}

/// One layer of step `step`: the layer's KV blocks stay acquired through the layer (attention reads
/// them), the weights are acquired at the run's granularity (run_layer_weights). The step's tokens
/// are appended to the newest KV block, which is released dirty.
void run_layer_step(policy_run& r, model_instance::layer& layer, int step) {
  const bench_config& cfg = r.cfg;
  const std::vector<model_instance::tensor*> use = weights_in_use(r, layer);
  std::vector<weight_view> kv_views;
  r.compute.begin_stall(r.cs);
  for (auto h : layer.kv) {
    const auto s = r.p.acquire(h, r.cs, r.pol.wait_each_fault);
    kv_views.push_back({s, 1, s.bytes, 0, 0, 0, false});
  }
  r.compute.end_stall(r.cs);
  run_layer_weights(r, use, kv_views);
  if (!layer.kv.empty()) {  // append this step's tokens to the newest block
    const std::size_t per_token = kv_bytes_per_token(cfg);
    const std::size_t offset =
        (static_cast<std::size_t>(r.kv_tokens) % static_cast<std::size_t>(cfg.kv_block_tokens)) *
        per_token;
    const std::size_t n =
        std::min(r.kv_block_bytes - offset, per_token * static_cast<std::size_t>(cfg.tokens));
    auto* base = static_cast<unsigned char*>(kv_views.back().span.data);
    r.dev.fill_pattern_async(base + offset, n, static_cast<std::uint64_t>(step), r.cs);
  }
  for (std::size_t b = 0; b < layer.kv.size(); ++b) {
    r.p.release(layer.kv[b], r.cs, /*dirty=*/b + 1 == layer.kv.size());
  }
}

/// After a timed step of `ms` wall time that started with the H2D engine busy for `busy0` ns: the
/// compute's spans traced, its compute and stall times and the transfer time taken as samples.
void sample_timed_step(policy_run& r, policy_result& res, double ms, std::uint64_t busy0) {
  constexpr double stalled_ms = 0.01;  // below this the marks' own cost, not a wait
  r.p.synchronize();
  for (const auto& sp : r.compute.take_spans())
    r.p.trace_compute_span("layer compute", sp.begin, sp.end);
  const double c = r.compute.take_compute_ms();
  for (double x : r.compute.stall_samples_ms()) {
    if (x >= stalled_ms) r.stalls.push_back(x);
  }
  r.stall_ms += r.compute.take_stall_ms();
  const double x = static_cast<double>(r.p.engine().metrics().h2d.busy_ns - busy0) / 1e6;
  res.step_ms.push_back(ms);
  r.compute_ms.push_back(c);
  r.transfer_ms.push_back(x);
  r.overlap.push_back(ms > 0 ? std::max(c, x) / ms : 0);
}

/// The warm-up and timed steps; returns the pager's metrics when the timed steps began (they were
/// reset then, so the timed steps' counts are the differences from them).
pager_metrics run_steps(policy_run& r, policy_result& res, const progress_fn& progress) {
  const bench_config& cfg = r.cfg;
  const int total_steps = cfg.warmup_steps + cfg.steps;
  pager_metrics m0{};
  for (int step = 0; step < total_steps; ++step) {
    if (step == cfg.warmup_steps) {  // steady state from here: the metrics start afresh
      r.p.synchronize();
      r.p.reset_metrics();
      m0 = r.p.metrics();
      r.compute.take_spans();
      r.compute.take_compute_ms();
      r.compute.take_stall_ms();
      r.compute.take_mismatches();
    }
    const std::uint64_t busy0 = r.p.engine().metrics().h2d.busy_ns;
    const auto t0 = clock_type::now();
    r.record = step == cfg.warmup_steps;
    for (auto& layer : r.inst.layers) run_layer_step(r, layer, step);
    r.record = false;
    r.cs.synchronize();
    const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (cfg.kv_context_tokens > 0) {
      r.kv_tokens += cfg.tokens;
      r.add_kv_blocks();
    }
    if (step >= cfg.warmup_steps) sample_timed_step(r, res, ms, busy0);
    if (progress) progress(r.pol.name, step + 1, total_steps);
  }
  return m0;
}

/// The timed steps' counts and rates into `res`: the pager's metrics now (m1) less those when the
/// timed steps began (m0), per step and per millisecond, and the link's use.
void aggregate(const policy_run& r, policy_result& res, const pager_metrics& m0,
               const pager_metrics& m1) {
  const bench_config& cfg = r.cfg;
  res.step = summarize(res.step_ms);
  res.meets_budget = res.step.p99 <= static_cast<double>(cfg.latency_budget.count());
  res.latency_budget_ms = static_cast<double>(cfg.latency_budget.count());
  res.fault = {static_cast<double>(m1.fault_latency.p50_ns) / 1e6,
               static_cast<double>(m1.fault_latency.p99_ns) / 1e6, 0,
               static_cast<double>(m1.fault_latency.max_ns) / 1e6,
               static_cast<double>(m1.fault_latency.mean_ns) / 1e6};
  res.counters = metrics_delta(m1, m0);  // the counters of the timed steps
  const pager_metrics& d = res.counters;
  double timed_ms = 0;
  for (double x : res.step_ms) timed_ms += x;
  // Late prefetches count as faults (they wait, with what remained of their load).
  res.fault_rate_per_ms =
      timed_ms > 0 ? static_cast<double>(d.faults + d.late_prefetches) / timed_ms : 0;
  res.hbm_peak_pct = m1.hbm.peak_pct;
  res.hbm_mean_pct = m1.hbm.mean_pct;
  // Link use over the timed steps: bytes that crossed H2D / wall time. (The engine's own
  // achieved_gbps divides by the time chunks were queued on the stream, which includes waits on
  // fences, so it reads low when loads wait for kernels.)
  const double h2d_bytes = static_cast<double>(m1.transfers.h2d.bytes - m0.transfers.h2d.bytes);
  res.h2d_gbps = timed_ms > 0 ? h2d_bytes / (timed_ms * 1e6) : 0;
  res.link_utilization =
      cfg.link_peak_bytes_per_second
          ? res.h2d_gbps * 1e9 / static_cast<double>(cfg.link_peak_bytes_per_second)
          : 0;
  res.fault_wait = m1.fault_wait;
  res.stall_ms_per_step =
      res.step_ms.empty() ? 0 : r.stall_ms / static_cast<double>(res.step_ms.size());
  res.stalled_acquires = r.stalls.size();
  res.stall = summarize(r.stalls);
  res.host_blocked_share =
      timed_ms > 0 ? static_cast<double>(m1.host_blocked_ns) / (timed_ms * 1e6) : 0;
  res.bytes_per_step = res.step_ms.empty() ? 0
                                           : static_cast<double>(d.page_in_bytes) /
                                                 static_cast<double>(res.step_ms.size());
  res.compute_ms = median(r.compute_ms);
  res.transfer_ms = median(r.transfer_ms);
  res.overlap_efficiency = median(r.overlap);
  res.prefetch_timely_share = m1.prefetch_timely_share;
  const latency_summary& late = m1.prefetch_lateness;
  res.prefetch_lateness = {
      static_cast<double>(late.p50_ns) / 1e6, static_cast<double>(late.p99_ns) / 1e6, 0,
      static_cast<double>(late.max_ns) / 1e6, static_cast<double>(late.mean_ns) / 1e6};
  res.prefetch_lateness_count = late.count;
  res.metrics_json = to_json(m1);
  res.compressed = cfg.compress;
  res.wire_bytes_per_step = res.step_ms.empty() ? 0
                                                : static_cast<double>(d.page_in_wire_bytes) /
                                                      static_cast<double>(res.step_ms.size());
  if (m1.compressed_bytes > 0)
    res.wire_ratio =
        static_cast<double>(m1.compressed_wire_bytes) / static_cast<double>(m1.compressed_bytes);
  const auto& z0 = m0.transfers.decode;
  const auto& z1 = m1.transfers.decode;
  res.decode_ms_per_step = res.step_ms.empty() ? 0
                                               : static_cast<double>(z1.decode_ns - z0.decode_ns) /
                                                     1e6 / static_cast<double>(res.step_ms.size());
  res.effective_logical_gbps = z1.effective_logical_gbps();
}

/// Belady's MIN for this budget and the bounds it sets: on the realised access sequence of a step
/// (the weights the first timed step acquired, in order, repeated cyclically), farthest next use
/// simulated with exact bytes, and the lower bound total - capacity. Dense weights only: MoE
/// routing and a growing KV cache have no fixed cyclic order (n/a, -1).
void min_reference(const policy_run& r, policy_result& res, std::size_t hbm_budget) {
  const bench_config& cfg = r.cfg;
  if (cfg.model.experts <= 1 && cfg.kv_context_tokens <= 0 && !r.realised.empty()) {
    std::vector<std::uint64_t> sizes;
    std::uint64_t total = 0;
    for (auto h : r.realised) {
      sizes.push_back(r.p.info(h).bytes);
      total += sizes.back();
    }
    res.belady_bytes_per_step = belady_bytes_per_cycle(sizes, hbm_budget);
    // Equal sizes: Belady's rule is the optimum. Unequal: the optimum lies between the lower bound
    // (each step reloads at least what does not fit: total - capacity) and the farthest-next-use
    // simulation, which is not optimal there; bytes / MIN uses the lower bound, so it is an upper
    // bound on the true ratio.
    const bool equal = std::all_of(sizes.begin(), sizes.end(),
                                   [&](std::uint64_t b) { return b == sizes.front(); });
    res.min_bytes_per_step = equal
                                 ? res.belady_bytes_per_step
                                 : static_cast<double>(total > hbm_budget ? total - hbm_budget : 0);
  } else {
    res.min_bytes_per_step = res.belady_bytes_per_step = -1;
  }
  const double peak = static_cast<double>(cfg.link_peak_bytes_per_second);
  if (res.belady_bytes_per_step >= 0 && peak > 0) {
    res.bound_ms = std::max(res.compute_ms, res.belady_bytes_per_step / peak * 1e3);
    res.bound_lower_ms = std::max(res.compute_ms, res.min_bytes_per_step / peak * 1e3);
    res.wire_bound_ms =
        std::max(res.compute_ms, res.min_bytes_per_step * res.wire_ratio / peak * 1e3);
  }
}

}  // namespace

policy_result run_policy(device& dev, const bench_config& cfg, const policy& pol,
                         layer_compute& compute, const host_weights& weights,
                         const std::string& trace_path, const progress_fn& progress) {
  policy_result res;
  res.name = pol.name;
  const std::uint64_t rounded_model = rounded_model_bytes(cfg);
  const std::size_t hbm_budget = policy_hbm_budget(cfg, pol, rounded_model);
  res.hbm_budget_bytes = hbm_budget;
  if (pol.all_resident && hbm_budget + (std::size_t{256} << 20) > dev.memory().free_bytes) {
    res.skipped = true;
    res.skip_reason = "the model does not fit in the device's free memory";
    return res;
  }
  pager p(dev,
          policy_pager_config(cfg, pol, hbm_budget, rounded_model, weights, !trace_path.empty()));
  stream compute_stream(dev);
  if (weights.block() != nullptr)
    p.add_host_region(weights.block(), weights.block_bytes(), host_region_kind::pinned);
  // A timing-only device stores no bytes: no payloads, nothing verified.
  policy_run r{dev,
               cfg,
               pol,
               compute,
               p,
               compute_stream,
               register_model(p, cfg, weights),
               dev.properties().timing_only,
               static_cast<std::size_t>(cfg.kv_block_tokens) * kv_bytes_per_token(cfg),
               cfg.kv_context_tokens,
               std::mt19937_64(cfg.seed),
               {},
               {},
               {},
               0,
               {},
               false,
               {}};
  r.add_kv_blocks();
  const std::vector<tensor_handle> sched = schedule_of(r.inst, cfg);
  if (pol.schedule) p.set_schedule(sched, /*cyclic=*/true);

  const pager_metrics m0 = run_steps(r, res, progress);
  p.synchronize();
  res.mismatches = compute.take_mismatches();
  const pager_metrics m1 = p.metrics();
  aggregate(r, res, m0, m1);
  min_reference(r, res, hbm_budget);
  res.granularity = granularity_of(cfg);
  res.lookahead = pol.mode == lookahead_mode::automatic ? "automatic" : "count";
  if (!trace_path.empty()) p.write_trace(trace_path);
  return res;
}

}  // namespace htp::bench
