// htp-stream-bench --train --zero2 (zero2_runner.hpp).
#include "zero2_runner.hpp"

#include "common/bench_device.hpp"
#include "gradient_slots.hpp"
#include "report.hpp"

#include <htp/collectives.hpp>
#include <htp/detail/check.hpp>
#include <htp/gradient_reducer.hpp>
#include <htp/node.hpp>
#include <htp/swap_shard.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace htp::bench {

std::vector<zero2_variant> zero2_variants() { return {{"htp", 2, 2}, {"per-layer", 1, 1}}; }

namespace {

using clock_type = std::chrono::steady_clock;

/// The run's sizes, per GPU unless said otherwise.
struct zero2_sizes {
  std::size_t layer_bytes = 0;  // one layer's weights (every layer has the same shape)
  std::size_t shard_bytes = 0;  // a layer's shard (padded as swap_shard pads it)
  std::size_t grad_count = 0;   // bf16 elements of a layer's gradient shard
  std::size_t activations = 0;  // reserved as --train reserves them
  std::size_t grad_shards = 0;  // every layer's gradient shard
  std::size_t optimizer = 0;    // fp32 master weights and two moments of the shard
  std::size_t grad_buffer = 0;  // a layer's full gradient (the reduce-scatter's send); 2 held
  std::size_t staging = 0;      // swap_shard's buffers
  double shard_params = 0;      // parameters in a GPU's shard of the model
};

zero2_sizes sizes_of(const bench_config& cfg, const zero2_options& o, const zero2_variant& v) {
  const std::size_t N = o.train.gpus, L = static_cast<std::size_t>(cfg.layers);
  const std::size_t bpe = bytes_per_element(cfg.type);
  zero2_sizes s;
  for (const auto& t : layer_tensors(cfg.model)) s.layer_bytes += t.rows * t.cols * bpe;
  s.shard_bytes = (s.layer_bytes + N - 1) / N;
  s.shard_bytes = (s.shard_bytes + device::alignment - 1) / device::alignment * device::alignment;
  s.grad_count = (s.layer_bytes / bpe + N - 1) / N;
  s.activations = static_cast<std::size_t>(o.train.batch) *
                  static_cast<std::size_t>(o.train.seq_len) *
                  static_cast<std::size_t>(cfg.model.hidden) * bpe * L;
  s.grad_shards = L * s.grad_count * 2;
  s.shard_params =
      static_cast<double>(L) * static_cast<double>(s.layer_bytes / bpe) / static_cast<double>(N);
  s.optimizer = static_cast<std::size_t>(s.shard_params * 12.0);
  s.grad_buffer = N * s.grad_count * 2;
  s.staging = v.ahead * v.layers_per_sync * N * s.shard_bytes;
  return s;
}

/// What the GPU threads share: the inputs, the node, each GPU's outputs (slot g written by GPU g's
/// thread only) and the first failure.
struct zero2_run {
  const bench_config& cfg;
  const zero2_options& o;
  const zero2_sizes& sz;
  std::vector<std::size_t> order;  // forward then backward
  std::int64_t layer_fwd_ns = 0;   // dilated, as the sim sleeps it
  std::int64_t optimizer_ns = 0;
  std::vector<std::unique_ptr<device>> devs;
  std::unique_ptr<node> nd;
  std::unique_ptr<collectives> coll;
  std::unique_ptr<swap_shard> ss;
  std::vector<std::vector<double>> step_ms;  // [gpu][step], warm-up included
  std::vector<double> sync_ms;               // [gpu], over the timed steps
  std::vector<gradient_reduction_metrics> reduction;
  std::vector<pager_metrics> metrics;
  std::vector<std::exception_ptr> err;
  std::mutex fail_mu;
  std::size_t first_failed = 0;  // devs.size(): none

  zero2_run(const bench_config& c, const zero2_options& opt, const zero2_sizes& s)
      : cfg(c), o(opt), sz(s) {}
};

/// One GPU's streams, buffers and timing events for the run.
struct zero2_gpu {
  device& dev;
  stream& cs;
  gradient_reducer& red;
  gradient_slots& grads;                 // a layer's full gradient, two used in turn
  char* shards;                          // every layer's gradient shard
  std::vector<event_ref> before, after;  // per visit: around swap_shard::acquire on compute
};

/// One step of GPU g, queued and waited for: each visit's layer acquired (its wait for the gather
/// timed between two events), computed and released; after a backward visit the layer's gradient
/// reduce-scattered into the GPU's shard; then the reductions joined and the optimizer step run.
void run_step(zero2_run& r, zero2_gpu& x, std::size_t g) {
  const std::size_t L = static_cast<std::size_t>(r.cfg.layers);
  for (std::size_t v = 0; v < r.order.size(); ++v) {
    const std::size_t l = r.order[v];
    const bool backward = v >= L;
    x.dev.record(x.before[v], x.cs);
    (void)r.ss->acquire(g, l, x.cs);
    x.dev.record(x.after[v], x.cs);
    void* grad = backward ? x.grads.next(x.cs) : nullptr;  // free once its last reduction is
    run_modelled(x.dev, backward ? 2 * r.layer_fwd_ns : r.layer_fwd_ns, x.cs);
    r.ss->release(g, l, x.cs);
    if (backward) {
      x.red.reduce_scatter(grad, x.shards + l * r.sz.grad_count * 2, r.sz.grad_count,
                           element_type::bfloat16, x.cs);
      x.grads.reduced(r.nd->gpu(g).engine().reduction_stream());
    }
  }
  x.red.join(x.cs);
  run_modelled(x.dev, r.optimizer_ns, x.cs);
  x.cs.synchronize();
}

/// The compute stream's time at the gathers' waits in the step just run (its events complete).
double sync_ms_of(zero2_gpu& x) {
  double ms = 0;
  for (std::size_t v = 0; v < x.before.size(); ++v) {
    const auto d = x.dev.elapsed(x.before[v], x.after[v]);
    if (d) ms += std::max(0.0, std::chrono::duration<double, std::milli>(*d).count());
  }
  return ms;
}

/// GPU g's warm-up and timed steps, its figures kept in its slots of `r`.
void run_steps(zero2_run& r, zero2_gpu& x, std::size_t g) {
  pager& p = r.nd->gpu(g);
  const int total = r.cfg.warmup_steps + r.cfg.steps;
  for (int step = 0; step < total; ++step) {
    if (step == r.cfg.warmup_steps) {
      p.synchronize();
      p.reset_metrics();
      x.red.reset_metrics();
    }
    const auto t0 = clock_type::now();
    run_step(r, x, g);
    r.step_ms[g].push_back(
        std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    if (step >= r.cfg.warmup_steps) r.sync_ms[g] += sync_ms_of(x);
  }
  r.reduction[g] = x.red.metrics();
  r.metrics[g] = p.metrics();
}

/// GPU g's thread. A failure aborts the collectives (no GPU waits for this one), stops GPU g's
/// gathers and drains its compute stream before anything of it is freed; it is kept in r.err.
void run_gpu(zero2_run& r, std::size_t g) {
  try {
    device& dev = *r.devs[g];
    stream cs(dev);
    gradient_slots grads(dev, r.sz.grad_buffer);
    const device_buffer shards(dev, r.sz.grad_shards);
    std::vector<event_ref> before, after;
    for (std::size_t v = 0; v < r.order.size(); ++v) {
      before.push_back(dev.create_timed_event());
      after.push_back(dev.create_timed_event());
    }
    const auto drop_events = [&] {
      for (event_ref e : before) dev.destroy_event(e);
      for (event_ref e : after) dev.destroy_event(e);
    };
    try {
      gradient_reducer red(dev, *r.coll, g, r.nd->gpu(g).engine().reduction_stream());
      zero2_gpu x{dev, cs, red, grads, static_cast<char*>(shards.ptr), before, after};
      try {
        run_steps(r, x, g);
      } catch (...) {
        r.coll->abort("a GPU of the ZeRO-2 run failed");  // the others' collectives return
        r.ss->stop(g);
        cs.synchronize();
        throw;
      }
      r.ss->stop(g);  // the look-ahead gathers, before the frees below synchronise the device
    } catch (...) {
      drop_events();
      throw;
    }
    drop_events();
  } catch (...) {
    r.err[g] = std::current_exception();
    r.coll->abort("a GPU of the ZeRO-2 run failed");
    std::lock_guard lock(r.fail_mu);
    if (r.first_failed == r.devs.size()) r.first_failed = g;
  }
}

/// The node: N timing-only sim GPUs, each with the run's modelled link, a host tier for the shards
/// (or the one given), each GPU's pager with what the reservations leave.
void make_node(zero2_run& r, std::size_t paged_budget) {
  const std::size_t N = r.o.train.gpus, slab = r.cfg.slab_bytes;
  r.devs = make_train_devices(r.cfg, r.o.train, 0);
  std::vector<device*> ptrs;
  for (const auto& d : r.devs) ptrs.push_back(d.get());
  node_config nc;
  const std::size_t need =
      (static_cast<std::size_t>(r.cfg.layers) * N * r.sz.shard_bytes + slab - 1) / slab * slab +
      4 * slab;
  nc.host_budget_bytes = r.o.host_budget_bytes > 0 ? r.o.host_budget_bytes / slab * slab : need;
  nc.host_slab_bytes = slab;
  nc.host_page_bytes = r.cfg.page_bytes;
  nc.gpu.hbm_budget_bytes = paged_budget;
  nc.gpu.slab_bytes = slab;
  nc.gpu.page_bytes = r.cfg.page_bytes;
  nc.gpu.chunk_bytes = r.cfg.chunk_bytes;
  nc.gpu.h2d.link_bytes_per_second = r.cfg.link_peak_bytes_per_second;
  nc.gpu.d2h.link_bytes_per_second = r.cfg.link_peak_bytes_per_second;
  r.nd = std::make_unique<node>(ptrs, nc);
  r.coll =
      make_sim_collectives(ptrs, static_cast<std::uint64_t>(r.o.train.interconnect_gbps * 1e9));
}

/// The GPUs' figures combined into `res` (undilated): each timed step's slowest GPU, the means over
/// GPUs of the rest; then the bound.
void combine(const zero2_run& r, zero2_result& res) {
  const std::size_t N = r.devs.size(), L = static_cast<std::size_t>(r.cfg.layers);
  const double scale = r.o.train.time_scale, steps = r.cfg.steps;
  for (int s = 0; s < r.cfg.steps; ++s) {
    double slowest = 0;
    for (std::size_t g = 0; g < N; ++g)
      slowest = std::max(slowest, r.step_ms[g][static_cast<std::size_t>(r.cfg.warmup_steps + s)]);
    res.step_ms.push_back(slowest / scale);
  }
  res.step = summarize(res.step_ms);
  double red = 0, exposed = 0, red_steps = 0;
  for (std::size_t g = 0; g < N; ++g) {
    res.sync_ms_per_step += r.sync_ms[g] / steps / static_cast<double>(N) / scale;
    res.page_in_bytes_per_step +=
        static_cast<double>(r.metrics[g].page_in_bytes) / steps / static_cast<double>(N);
    res.hbm_peak_pct = std::max(res.hbm_peak_pct, r.metrics[g].hbm.peak_pct);
    red += r.reduction[g].reduction_ms;
    exposed += r.reduction[g].exposed_ms;
    red_steps += static_cast<double>(r.reduction[g].steps);
  }
  res.sync_ms_per_two_layers = res.sync_ms_per_step / (static_cast<double>(r.order.size()) / 2);
  const double per = red_steps > 0 ? 1.0 / red_steps / scale : 0;
  res.reduction_ms = red * per;
  res.reduction_exposed_ms = exposed * per;
  res.reduction_hidden_ms = res.reduction_ms - res.reduction_exposed_ms;
  res.exposed_share = red > 0 ? exposed / red : 0;
  const swap_shard_metrics sm = r.ss->metrics();
  res.waits_per_step =
      static_cast<double>(sm.compute_waits) /
      static_cast<double>(N * static_cast<std::size_t>(r.cfg.warmup_steps + r.cfg.steps));
  res.layer_source = sm.layers_from_host > 0 ? "host" : "peers";
  res.compute_ms = static_cast<double>(3 * L) * static_cast<double>(r.layer_fwd_ns) / 1e6 / scale;
  res.optimizer_ms = static_cast<double>(r.optimizer_ns) / 1e6 / scale;
  // Each visit gathers N - 1 shards over the interconnect (the sim's model of an all-gather).
  const double ic = r.o.train.interconnect_gbps * 1e9 * scale;
  res.gather_ms = ic > 0 ? static_cast<double>(r.order.size()) * static_cast<double>(N - 1) *
                               static_cast<double>(r.sz.shard_bytes) / ic * 1e3
                         : 0;
  const double link = static_cast<double>(r.cfg.link_peak_bytes_per_second) * scale;
  const double paging_ms = link > 0 ? res.page_in_bytes_per_step / link * 1e3 : 0;
  res.bound_ms = std::max({res.compute_ms, res.gather_ms, paging_ms}) + res.optimizer_ms;
  res.step_over_bound = res.bound_ms > 0 ? res.step.p50 / res.bound_ms : 0;
}

}  // namespace

zero2_result run_zero2(const bench_config& cfg, const zero2_options& o, const zero2_variant& v) {
  HTP_EXPECTS(o.train.gpus >= 1 && cfg.layers >= 1, invalid_argument,
              "--zero2 needs --gpus >= 1 and a layer");
  const zero2_sizes sz = sizes_of(cfg, o, v);
  zero2_result res;
  res.variant = v.name;
  res.gpus = o.train.gpus;
  res.layers = static_cast<std::size_t>(cfg.layers);
  res.hbm_budget_bytes = cfg.hbm_budget_bytes;
  res.ahead = v.ahead;
  res.layers_per_sync = v.layers_per_sync;
  res.reserved_bytes = sz.activations + sz.grad_shards + sz.optimizer + 2 * sz.grad_buffer;
  if (cfg.hbm_budget_bytes < res.reserved_bytes + sz.staging + 2 * cfg.slab_bytes) {
    res.skipped = true;
    res.skip_reason = detail::concat(
        "the activations, gradient shards, optimizer state and a layer's gradient (",
        res.reserved_bytes >> 20, " MiB) and the staging buffers (", sz.staging >> 20,
        " MiB) do not fit ", cfg.hbm_budget_bytes >> 20, " MiB of HBM per GPU");
    return res;
  }
  res.paged_budget_bytes =
      (cfg.hbm_budget_bytes - res.reserved_bytes) / cfg.page_bytes * cfg.page_bytes;
  zero2_run r{cfg, o, sz};
  r.order = forward_backward_order(res.layers);
  const double tokens = static_cast<double>(o.train.batch) * static_cast<double>(o.train.seq_len);
  const double layer_params = static_cast<double>(sz.layer_bytes / bytes_per_element(cfg.type));
  r.layer_fwd_ns =
      static_cast<std::int64_t>(2.0 * layer_params * tokens / o.train.flops_per_second * 1e9);
  r.optimizer_ns = static_cast<std::int64_t>(28.0 * sz.shard_params / (o.hbm_gbps * 1e9) * 1e9);
  make_node(r, res.paged_budget_bytes);
  swap_shard_config sc;
  sc.ahead = v.ahead;
  sc.layers_per_sync = v.layers_per_sync;
  sc.order = r.order;
  sc.interconnect_bytes_per_second = static_cast<std::uint64_t>(o.train.interconnect_gbps * 1e9);
  sc.host_bytes_per_second = cfg.link_peak_bytes_per_second;
  r.ss = std::make_unique<swap_shard>(*r.nd, *r.coll,
                                      std::vector<std::size_t>(res.layers, sz.layer_bytes),
                                      std::vector<const void*>{}, sc);
  const std::size_t N = o.train.gpus;
  r.step_ms.resize(N);
  r.sync_ms.assign(N, 0.0);
  r.reduction.resize(N);
  r.metrics.resize(N);
  r.err.resize(N);
  r.first_failed = N;
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < N; ++g) threads.emplace_back([&r, g] { run_gpu(r, g); });
  for (auto& t : threads) t.join();
  if (r.first_failed < N) std::rethrow_exception(r.err[r.first_failed]);
  combine(r, res);
  r.ss.reset();  // before the node: its layers live there
  return res;
}

nlohmann::json to_json(const zero2_result& r) {
  nlohmann::json j{{"variant", r.variant},
                   {"gpus", r.gpus},
                   {"hbm_budget_bytes", r.hbm_budget_bytes},
                   {"skipped", r.skipped}};
  if (r.skipped) {
    j["reason"] = r.skip_reason;
    return j;
  }
  j["layers"] = r.layers;
  j["ahead"] = r.ahead;
  j["layers_per_sync"] = r.layers_per_sync;
  j["reserved_bytes"] = r.reserved_bytes;
  j["paged_budget_bytes"] = r.paged_budget_bytes;
  j["layer_source"] = r.layer_source;
  j["steps_ms"] = r.step_ms;
  j["step_ms"] = to_json(r.step);
  j["compute_ms_per_step"] = r.compute_ms;
  j["optimizer_ms_per_step"] = r.optimizer_ms;
  j["gather_ms_per_step"] = r.gather_ms;
  j["bound_ms"] = r.bound_ms;
  j["step_over_bound"] = r.step_over_bound;
  j["sync"] = {{"waits_per_step", r.waits_per_step},
               {"ms_per_step", r.sync_ms_per_step},
               {"ms_per_two_layers", r.sync_ms_per_two_layers},
               {"design_barrier_ms_per_two_layers", 2 * 3.4}};
  j["page_in_bytes_per_step"] = r.page_in_bytes_per_step;
  j["reduction"] = {{"kind", "reduce_scatter"},
                    {"ms_per_step", r.reduction_ms},
                    {"hidden_ms", r.reduction_hidden_ms},
                    {"exposed_ms", r.reduction_exposed_ms},
                    {"exposed_share", r.exposed_share}};
  j["hbm_peak_pct"] = r.hbm_peak_pct;
  return j;
}

void print_zero2_table(const std::vector<zero2_result>& results) {
  std::printf("\n  ZeRO-2 + swap-and-shard (forward then backward, gathers ahead both ways), "
              "timing-only sim\n  %-10s %9s %10s %10s %10s %8s %7s %10s %10s %9s\n",
              "variant", "budget", "step p50", "compute", "bound", "step/bd", "waits", "sync/2lyr",
              "reduce", "exposed");
  for (const auto& r : results) {
    if (r.skipped) {
      std::printf("  %-10s %7.2fGB skipped: %s\n", r.variant.c_str(),
                  static_cast<double>(r.hbm_budget_bytes) / 1e9, r.skip_reason.c_str());
      continue;
    }
    std::printf("  %-10s %7.2fGB %8.2fms %8.2fms %8.2fms %8.3f %7.1f %8.3fms %8.2fms %8.1f%%\n",
                r.variant.c_str(), static_cast<double>(r.hbm_budget_bytes) / 1e9, r.step.p50,
                r.compute_ms + r.optimizer_ms, r.bound_ms, r.step_over_bound, r.waits_per_step,
                r.sync_ms_per_two_layers, r.reduction_ms, 100 * r.exposed_share);
  }
  std::printf("  sync/2lyr: the compute stream's wait for gathers per two layers; the design "
              "quotes a barrier of 3.4 ms per layer (6.8 ms per two)\n");
}

}  // namespace htp::bench
