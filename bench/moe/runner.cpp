// htp-moe-bench's runs. See runner.hpp.
#include "moe/runner.hpp"

#include "shared/belady_min.hpp"
#include "shared/htp_layout.hpp"

#include <htp/error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <list>
#include <set>
#include <tuple>

namespace htp::bench {
namespace {

/// The p-quantile (nearest rank) of `v`; 0 when empty.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank > 0 ? rank - 1 : 0)];
}

/// The expert a layer tensor belongs to ("moe.experts.<e>.") or -1.
int expert_index(const std::string& name) {
  const std::string prefix = "moe.experts.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  return std::stoi(name.substr(prefix.size()));
}

}  // namespace

moe_layout layout_of(const moe_config& cfg) {
  if (cfg.model.experts <= 1)
    throw invalid_argument("htp-moe-bench: model '" + cfg.model.name + "' has no experts");
  moe_layout out;
  const auto shapes = layer_tensors(cfg.model);
  for (int l = 0; l < cfg.layers; ++l) {
    moe_layout::layer layer;
    layer.experts.resize(static_cast<std::size_t>(cfg.model.experts));
    for (const auto& t : shapes) {
      const int e = expert_index(t.name);
      (e < 0 ? layer.shared : layer.experts[static_cast<std::size_t>(e)])
          .push_back(out.bytes.size());
      out.bytes.push_back(t.rows * t.cols * bytes_per_element(cfg.type));
    }
    out.layers.push_back(std::move(layer));
  }
  return out;
}

std::vector<std::size_t> step_accesses(const moe_layout& layout, const routing_trace& trace,
                                       int step) {
  std::vector<std::size_t> seq;
  for (std::size_t l = 0; l < layout.layers.size(); ++l) {
    const auto& layer = layout.layers[l];
    seq.insert(seq.end(), layer.shared.begin(), layer.shared.end());
    for (int e : trace.experts_of(step, static_cast<int>(l))) {
      const auto& m = layer.experts[static_cast<std::size_t>(e)];
      seq.insert(seq.end(), m.begin(), m.end());
    }
  }
  return seq;
}

const char* to_string(moe_policy p) noexcept {
  switch (p) {
    case moe_policy::today: return "today";
    case moe_policy::lru: return "lru";
    case moe_policy::popularity: return "popularity";
  }
  return "?";
}

moe_policy parse_moe_policy(const std::string& name) {
  for (moe_policy p : {moe_policy::today, moe_policy::lru, moe_policy::popularity}) {
    if (name == to_string(p)) return p;
  }
  throw invalid_argument("htp-moe-bench: unknown policy '" + name + "' (today, lru, popularity)");
}

namespace {

/// The realised access sequence of every step of `trace`, and where the timed steps begin.
std::vector<std::size_t> all_accesses(const moe_config& cfg, const moe_layout& layout,
                                      const routing_trace& trace, std::size_t& timed_from) {
  std::vector<std::size_t> seq;
  for (int s = 0; s < static_cast<int>(trace.choice.size()); ++s) {
    if (s == cfg.warmup) timed_from = seq.size();
    const auto step = step_accesses(layout, trace, s);
    seq.insert(seq.end(), step.begin(), step.end());
  }
  return seq;
}

/// The bytes each tensor takes in the pager (page-rounded as htp stores it), by layout index.
std::vector<std::uint64_t> footprints(const moe_config& cfg, const moe_layout& layout) {
  std::vector<std::uint64_t> footprint;
  for (auto b : layout.bytes) footprint.push_back(htp_tensor_bytes(b, cfg.page_bytes));
  return footprint;
}

}  // namespace

std::uint64_t oracle_bytes(const moe_config& cfg, const moe_layout& layout,
                           const routing_trace& trace) {
  const auto footprint = footprints(cfg, layout);
  std::size_t timed_from = 0;
  const auto seq = all_accesses(cfg, layout, trace, timed_from);
  return belady_trace_bytes(footprint, layout.bytes, seq, cfg.hbm_budget_bytes, timed_from);
}

std::uint64_t best_fixed_set_bytes(const moe_config& cfg, const moe_layout& layout,
                                   const routing_trace& trace) {
  const std::size_t n = layout.bytes.size();
  const auto footprint = footprints(cfg, layout);
  std::size_t timed_from = 0;
  const auto seq = all_accesses(cfg, layout, trace, timed_from);
  std::vector<std::uint64_t> count(n, 0);
  for (std::size_t t : seq) ++count[t];
  // Greedy by accesses per byte (sizes are few and equal within a kind, so greedy is near exact).
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return static_cast<double>(count[a]) / static_cast<double>(footprint[a]) >
           static_cast<double>(count[b]) / static_cast<double>(footprint[b]);
  });
  const std::uint64_t largest = *std::max_element(footprint.begin(), footprint.end());
  if (cfg.hbm_budget_bytes < largest) return 0;
  std::uint64_t fixed_room = cfg.hbm_budget_bytes - largest, used = 0;
  std::vector<bool> fixed(n, false);
  for (std::size_t i : order) {
    if (count[i] > 0 && used + footprint[i] <= fixed_room) {
      fixed[i] = true;
      used += footprint[i];
    }
  }
  // The rest through the leftover room, least recently used out first; the fixed set is loaded
  // once, before the timed steps (its loads fall in the warm-up).
  const std::uint64_t room = cfg.hbm_budget_bytes - used;
  std::list<std::size_t> lru;  // most recent first
  std::vector<std::list<std::size_t>::iterator> where(n, lru.end());
  std::vector<bool> in(n, false);
  std::uint64_t in_bytes = 0, missed = 0;
  for (std::size_t k = 0; k < seq.size(); ++k) {
    const std::size_t t = seq[k];
    if (fixed[t]) continue;
    if (in[t]) {
      lru.erase(where[t]);
    } else {
      if (k >= timed_from) missed += layout.bytes[t];
      while (in_bytes + footprint[t] > room) {
        const std::size_t v = lru.back();
        lru.pop_back();
        in[v] = false;
        in_bytes -= footprint[v];
      }
      in[t] = true;
      in_bytes += footprint[t];
    }
    lru.push_front(t);
    where[t] = lru.begin();
  }
  return missed;
}

std::uint64_t lfu_bytes(const moe_config& cfg, const moe_layout& layout,
                        const routing_trace& trace) {
  const std::size_t n = layout.bytes.size();
  const auto footprint = footprints(cfg, layout);
  std::vector<std::uint64_t> count(n, 0), last(n, 0);
  std::size_t timed_from = 0;
  const auto seq = all_accesses(cfg, layout, trace, timed_from);
  std::set<std::tuple<std::uint64_t, std::uint64_t, std::size_t>> resident;  // (count, last, i)
  std::vector<bool> in(n, false);
  std::uint64_t used = 0, missed = 0;
  for (std::size_t k = 0; k < seq.size(); ++k) {
    const std::size_t t = seq[k];
    if (in[t]) {
      resident.erase({count[t], last[t], t});
    } else {
      if (k >= timed_from) missed += layout.bytes[t];
      while (used + footprint[t] > cfg.hbm_budget_bytes && !resident.empty()) {
        const std::size_t v = std::get<2>(*resident.begin());
        resident.erase(resident.begin());
        in[v] = false;
        used -= footprint[v];
      }
      in[t] = true;
      used += footprint[t];
    }
    ++count[t];
    last[t] = k;
    resident.insert({count[t], last[t], t});
  }
  return missed;
}

namespace {

/// The pager configuration of a policy: cfg's budget, a host tier holding every tensor, the link
/// uncapped, the policy's eviction rule.
pager_config moe_pager_config(const moe_config& cfg, moe_policy pol, const moe_layout& layout) {
  const std::uint64_t slab = cfg.slab_bytes;
  std::uint64_t host = 0;
  for (auto b : footprints(cfg, layout)) host += b;
  pager_config pc;
  pc.hbm_budget_bytes = cfg.hbm_budget_bytes;
  pc.host_budget_bytes = (host + 4 * slab + slab - 1) / slab * slab;
  pc.slab_bytes = cfg.slab_bytes;
  pc.page_bytes = cfg.page_bytes;
  pc.chunk_bytes = cfg.chunk_bytes;
  pc.h2d.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  pc.d2h.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  pc.h2d.unlimited = true;
  pc.d2h.unlimited = true;
  pc.popularity_half_life = cfg.popularity_half_life;
  pc.eviction = pol == moe_policy::lru ? eviction_rule::lru : eviction_rule::automatic;
  return pc;
}

/// One policy's run in progress.
struct moe_run {
  const moe_config& cfg;
  moe_policy pol;
  const moe_layout& layout;
  const routing_trace& trace;
  pager& p;
  stream& cs;
  layer_compute& compute;
  std::vector<tensor_handle> handles;  ///< by layout index
  std::vector<std::uint64_t> rows, cols;
};

/// Acquires tensor `i`, runs its kernel and releases it, as a runner does one module at a time.
void run_tensor(moe_run& r, std::size_t i) {
  const tensor_handle h = r.handles[i];
  const device_span s = r.p.acquire(h, r.cs);
  r.compute.run_layer({{s, r.rows[i], r.cols[i], 0, 0, 0, false}}, r.cfg.tokens, r.cs);
  r.p.release(h, r.cs);
}

/// One decode step: per layer the shared tensors (the router last), then, once the router has
/// chosen (popularity: expect() tells the pager), the chosen experts' matrices.
void run_step(moe_run& r, int step) {
  for (std::size_t l = 0; l < r.layout.layers.size(); ++l) {
    const auto& layer = r.layout.layers[l];
    for (std::size_t i : layer.shared) run_tensor(r, i);
    const std::vector<int> chosen = r.trace.experts_of(step, static_cast<int>(l));
    if (r.pol == moe_policy::popularity) {
      std::vector<tensor_handle> hs;
      for (int e : chosen) {
        for (std::size_t i : layer.experts[static_cast<std::size_t>(e)]) hs.push_back(r.handles[i]);
      }
      r.p.expect(hs);
    }
    for (int e : chosen) {
      for (std::size_t i : layer.experts[static_cast<std::size_t>(e)]) run_tensor(r, i);
    }
  }
}

/// Registers the layers, declares the shared tensors' schedule (and, popularity, each layer's
/// routed group after its router).
void set_up_model(moe_run& r) {
  const auto shapes = layer_tensors(r.cfg.model);
  for (std::size_t i = 0; i < r.layout.bytes.size(); ++i) {
    const auto& t = shapes[i % shapes.size()];
    r.handles.push_back(r.p.register_tensor("L" + std::to_string(i / shapes.size()) + "." + t.name,
                                            r.layout.bytes[i], tensor_kind::weight, nullptr));
    r.rows.push_back(t.rows);
    r.cols.push_back(t.cols);
  }
  std::vector<tensor_handle> sched;
  for (const auto& layer : r.layout.layers) {
    for (std::size_t i : layer.shared) sched.push_back(r.handles[i]);
  }
  r.p.set_schedule(sched, /*cyclic=*/true);
  if (r.pol != moe_policy::popularity) return;
  const int k = std::min(r.cfg.model.experts, r.cfg.tokens * r.cfg.model.experts_per_token);
  for (const auto& layer : r.layout.layers) {
    std::vector<tensor_handle> members;
    for (const auto& e : layer.experts) {
      for (std::size_t i : e) members.push_back(r.handles[i]);
    }
    const auto per_expert = static_cast<unsigned>(layer.experts.front().size());
    r.p.set_routed_group(r.handles[layer.shared.back()], members,
                         static_cast<unsigned>(k) * per_expert);
  }
}

/// The timed steps' figures into `res`: counters as differences from `m0`, the rest from `m1`.
void aggregate(moe_result& res, const pager_metrics& m0, const pager_metrics& m1,
               const std::vector<double>& compute_ms) {
  res.counters = metrics_delta(m1, m0);
  res.step_p50_ms = quantile(res.step_ms, 0.5);
  res.step_p99_ms = quantile(res.step_ms, 0.99);
  res.compute_ms = quantile(compute_ms, 0.5);
  res.prefetch_timely_share = m1.prefetch_timely_share;
  res.lateness_p50_ms = static_cast<double>(m1.prefetch_lateness.p50_ns) / 1e6;
  res.lateness_p99_ms = static_cast<double>(m1.prefetch_lateness.p99_ns) / 1e6;
  res.lateness_count = m1.prefetch_lateness.count;
  res.hbm_mean_pct = m1.hbm.mean_pct;
  res.metrics_json = to_json(m1);
}

}  // namespace

moe_result run_moe_policy(device& dev, const moe_config& cfg, moe_policy pol,
                          layer_compute& compute, const routing_trace& trace) {
  moe_result res;
  res.name = to_string(pol);
  const moe_layout layout = layout_of(cfg);
  pager p(dev, moe_pager_config(cfg, pol, layout));
  stream cs(dev);
  moe_run r{cfg, pol, layout, trace, p, cs, compute, {}, {}, {}};
  set_up_model(r);
  pager_metrics m0{};
  std::vector<double> compute_ms;
  const int total = static_cast<int>(trace.choice.size());
  for (int step = 0; step < total; ++step) {
    if (step == cfg.warmup) {  // steady state from here
      p.synchronize();
      p.reset_metrics();
      m0 = p.metrics();
      compute.take_compute_ms();
      compute.take_spans();
      compute.take_stall_ms();
    }
    const auto t0 = std::chrono::steady_clock::now();
    run_step(r, step);
    cs.synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    if (step >= cfg.warmup) {
      res.step_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      compute.take_spans();
      compute_ms.push_back(compute.take_compute_ms());
    }
  }
  p.synchronize();
  aggregate(res, m0, p.metrics(), compute_ms);
  return res;
}

}  // namespace htp::bench
