// htp-stream-bench --train (train_runner.hpp).
#include "train_runner.hpp"

#include "common/bench_device.hpp"
#include "gradient_slots.hpp"
#include "report.hpp"
#include "shared/belady_min.hpp"
#include "shared/htp_layout.hpp"

#include <htp/collectives.hpp>
#include <htp/detail/check.hpp>
#include <htp/gradient_reducer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace htp::bench {
namespace {

using clock_type = std::chrono::steady_clock;

/// One use in the step: a weight (layer-major index, its modelled compute) or a layer's activation
/// (index weights + layer, held from its layer's first use to its last).
struct step_use {
  std::size_t tensor;
  std::int64_t compute_ns;
  bool activation = false;
  bool backward = false;
  bool layer_begin = false, layer_end = false;  // the first and last use of the layer's pass
};

/// The step's sequence: forward over every layer's weights in order, then backward in reverse,
/// each weight used twice; forward FLOPs 2 x params x tokens, backward twice that. With
/// `activations`, each layer's pass starts with its activation (index `weights` + layer): written
/// in the forward pass, read in the backward pass (where its last use ends it).
std::vector<step_use> step_sequence(const bench_config& cfg, const train_options& o,
                                    bool activations) {
  const auto shapes = layer_tensors(cfg.model);
  const double tokens = static_cast<double>(o.batch) * static_cast<double>(o.seq_len);
  const auto fwd_ns = [&](std::size_t i) {
    const double params = static_cast<double>(shapes[i].rows * shapes[i].cols);
    return static_cast<std::int64_t>(2.0 * params * tokens / o.flops_per_second * 1e9);
  };
  std::vector<step_use> seq;
  const std::size_t n = shapes.size(), L = static_cast<std::size_t>(cfg.layers);
  const auto pass = [&](std::size_t l, bool backward) {
    const std::size_t first = seq.size();
    if (activations) seq.push_back({L * n + l, 0, true, backward});
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = backward ? n - 1 - k : k;
      seq.push_back({l * n + i, (backward ? 2 : 1) * fwd_ns(i), false, backward});
    }
    seq[first].layer_begin = true;
    seq.back().layer_end = true;
  };
  for (std::size_t l = 0; l < L; ++l) pass(l, false);
  for (std::size_t l = L; l-- > 0;) pass(l, true);
  return seq;
}

/// What the GPU threads of one budget's run share: the inputs, each GPU's outputs (slot g written
/// by GPU g's thread only) and the first failure.
struct train_run {
  const bench_config& cfg;
  const train_options& o;
  const std::vector<step_use>& seq;
  const std::vector<std::uint64_t>& tensor_bytes;  // the weights, layer-major
  std::size_t paged_budget;
  std::size_t activation_bytes;  // per layer, when the activations are paged (0: reserved)
  std::vector<std::unique_ptr<device>> devs;
  std::unique_ptr<collectives> coll;
  std::vector<std::vector<double>> step_ms;           // [gpu][step], warm-up included
  std::vector<gradient_reduction_metrics> reduction;  // [gpu], the timed steps'
  std::vector<pager_metrics> metrics;
  std::vector<std::exception_ptr> err;
  std::mutex fail_mu;
  std::size_t first_failed = 0;  // the first GPU to fail; devs.size(): none
};

/// The pager of one GPU: cfg's slab, page and chunk sizes, `budget` bytes of HBM, the host tier
/// holding every weight (timing-only: addresses, no bytes), the schedule-auto policy's settings
/// (Belady eviction on the schedule, lookahead as far as the link needs to cover the compute).
pager_config train_pager_config(const bench_config& cfg, std::size_t budget,
                                std::uint64_t rounded_model) {
  const std::size_t slab = cfg.slab_bytes;
  pager_config pc;
  pc.hbm_budget_bytes = budget;
  pc.host_budget_bytes = (rounded_model + 5 * slab - 1) / slab * slab;
  pc.slab_bytes = slab;
  pc.page_bytes = cfg.page_bytes;
  pc.chunk_bytes = cfg.chunk_bytes;
  pc.h2d.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  pc.d2h.link_bytes_per_second = cfg.link_peak_bytes_per_second;
  pc.h2d.unlimited = true;
  pc.d2h.unlimited = true;
  pc.lookahead = lookahead_mode::automatic;
  pc.prefetch_lookahead = 2;
  pc.eviction = eviction_rule::automatic;
  pc.prefetch = prefetch_mode::min_page_ins;
  pc.latency_budget = cfg.latency_budget;
  return pc;
}

/// One GPU's pager, streams, gradient buffers and reducer for the run.
struct gpu_state {
  device& dev;
  pager& p;
  stream& cs;
  gradient_slots& grads;
  std::size_t grad_count;         // bf16 elements of the largest layer's gradient
  std::vector<tensor_handle> hs;  // the weights, then the activations
  gradient_reducer& red;          // on the pager's reduction stream
  void* grad = nullptr;           // the buffer the current layer's backward writes
};

/// After layer `l`'s backward: its gradient all-reduced on the reduction stream once the compute
/// stream has finished the layer (the library's gradient_reducer, which times it).
void reduce_layer(train_run& r, gpu_state& g, std::size_t l) {
  std::uint64_t bytes = 0;
  const std::size_t n = r.tensor_bytes.size() / static_cast<std::size_t>(r.cfg.layers);
  for (std::size_t i = 0; i < n; ++i) bytes += r.tensor_bytes[l * n + i];
  const std::size_t count = std::min<std::size_t>(g.grad_count, (bytes + 1) / 2);
  g.red.all_reduce(g.grad, count, element_type::bfloat16, g.cs);
  g.grads.reduced(g.p.engine().reduction_stream());
}

/// One training step of GPU `rank`, queued and waited for: forward and backward over the schedule,
/// each layer's gradient reduced after its backward, the step's end joined with the reductions'.
void run_step(train_run& r, gpu_state& g) {
  const std::size_t n = r.tensor_bytes.size() / static_cast<std::size_t>(r.cfg.layers);
  std::optional<tensor_handle> act;  // the layer's activation, held through its pass
  for (const step_use& u : r.seq) {
    if (u.layer_begin && u.backward) g.grad = g.grads.next(g.cs);
    (void)g.p.acquire(g.hs[u.tensor], g.cs);
    if (u.activation) {
      act = g.hs[u.tensor];  // written (forward) or read (backward) by the layer's kernels
    } else {
      run_modelled(g.dev, u.compute_ns, g.cs);
      g.p.release(g.hs[u.tensor], g.cs);
    }
    if (!u.layer_end) continue;
    if (act && u.backward) g.p.release_last_use(*act, g.cs);  // dead: never written back
    if (act && !u.backward) g.p.release(*act, g.cs, /*dirty=*/true);
    act.reset();
    if (u.backward) reduce_layer(r, g, u.tensor / n);
  }
  // The optimizer step (not modelled) waits for every reduction: so does the step's end.
  g.red.join(g.cs);
  g.cs.synchronize();
}

/// GPU `rank`'s warm-up and timed steps; its step times, reductions and pager metrics kept in its
/// slots of `r`.
void run_gpu_steps(train_run& r, gpu_state& g, std::size_t rank) {
  const int total = r.cfg.warmup_steps + r.cfg.steps;
  for (int step = 0; step < total; ++step) {
    if (step == r.cfg.warmup_steps) {
      g.p.synchronize();
      g.p.reset_metrics();
      g.red.reset_metrics();
    }
    const auto t0 = clock_type::now();
    run_step(r, g);
    r.step_ms[rank].push_back(
        std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
  }
  g.p.synchronize();
  r.metrics[rank] = g.p.metrics();
  r.reduction[rank] = g.red.metrics();
}

/// GPU `rank`'s thread: its pager over its device, the model registered, the step's sequence as the
/// cyclic schedule, then its steps. A failure aborts the collectives (no rank waits for it) and is
/// kept in r.err.
void run_gpu(train_run& r, std::size_t rank) {
  try {
    device& dev = *r.devs[rank];
    std::uint64_t rounded = 0, largest_layer = 0, layer = 0;
    const std::size_t n = r.tensor_bytes.size() / static_cast<std::size_t>(r.cfg.layers);
    for (std::size_t t = 0; t < r.tensor_bytes.size(); ++t) {
      rounded += htp_tensor_bytes(r.tensor_bytes[t], r.cfg.page_bytes);
      layer += r.tensor_bytes[t];
      if ((t + 1) % n == 0) largest_layer = std::max(largest_layer, std::exchange(layer, 0));
    }
    const std::size_t L = static_cast<std::size_t>(r.cfg.layers);
    if (r.activation_bytes > 0)
      rounded += L * htp_tensor_bytes(r.activation_bytes, r.cfg.page_bytes);
    pager p(dev, train_pager_config(r.cfg, r.paged_budget, rounded));
    stream cs(dev);
    const auto shapes = layer_tensors(r.cfg.model);
    std::vector<tensor_handle> hs;
    for (std::size_t t = 0; t < r.tensor_bytes.size(); ++t) {
      hs.push_back(p.register_tensor("L" + std::to_string(t / n) + "." + shapes[t % n].name,
                                     r.tensor_bytes[t], tensor_kind::weight, nullptr));
    }
    for (std::size_t l = 0; r.activation_bytes > 0 && l < L; ++l) {
      hs.push_back(p.register_tensor("L" + std::to_string(l) + ".activation", r.activation_bytes,
                                     tensor_kind::activation));
    }
    std::vector<tensor_handle> sched;
    for (const auto& u : r.seq) sched.push_back(hs[u.tensor]);
    p.set_schedule(sched, /*cyclic=*/true);
    gradient_slots grads(dev, largest_layer);
    gradient_reducer red(dev, *r.coll, rank, p.engine().reduction_stream());
    gpu_state g{dev, p, cs, grads, largest_layer / 2, hs, red};
    try {
      run_gpu_steps(r, g, rank);
    } catch (...) {
      r.coll->abort("a GPU of the training run failed");  // the reducer's wait then ends
      cs.synchronize();
      p.synchronize();
      throw;
    }
  } catch (...) {
    r.err[rank] = std::current_exception();
    r.coll->abort("a GPU of the training run failed");
    std::lock_guard lock(r.fail_mu);
    if (r.first_failed == r.devs.size()) r.first_failed = rank;
  }
}

/// Belady's rule on the step's sequence through `capacity` bytes, each tensor taking its
/// page-rounded bytes and counting its bytes: the mean over two steps after two of warm-up.
double belady_per_step(const train_run& r, std::uint64_t capacity) {
  std::vector<std::uint64_t> footprint;
  for (const auto b : r.tensor_bytes) footprint.push_back(htp_tensor_bytes(b, r.cfg.page_bytes));
  std::vector<std::size_t> trace;
  for (int c = 0; c < 4; ++c) {
    for (const auto& u : r.seq) trace.push_back(u.tensor);  // weights only (reserved activations)
  }
  return static_cast<double>(
             belady_trace_bytes(footprint, r.tensor_bytes, trace, capacity, 2 * r.seq.size())) /
         2.0;
}

}  // namespace

namespace {

/// The GPUs' figures combined into `res`: each timed step's slowest GPU, the means over GPUs of the
/// bytes paged, the reductions and the pager's counters; then the bounds.
void combine(train_run& r, train_result& res, double link_bytes_per_second) {
  const std::size_t N = r.devs.size();
  const auto steps = static_cast<std::size_t>(r.cfg.steps);
  const double scale = r.o.time_scale;
  for (std::size_t s = 0; s < steps; ++s) {
    double slowest = 0;
    for (std::size_t g = 0; g < N; ++g)
      slowest = std::max(slowest, r.step_ms[g][static_cast<std::size_t>(r.cfg.warmup_steps) + s]);
    res.step_ms.push_back(slowest / scale);
  }
  res.step = summarize(res.step_ms);
  double red = 0, exposed = 0, reduced_steps = 0;
  res.prefetch_timely_share = 0;
  for (std::size_t g = 0; g < N; ++g) {
    const pager_metrics& m = r.metrics[g];
    const double per = 1.0 / static_cast<double>(steps * N);
    res.bytes_per_step += static_cast<double>(m.page_in_bytes) * per;
    res.write_back_bytes_per_step += static_cast<double>(m.write_back_bytes) * per;
    res.faults_per_step += static_cast<double>(m.faults) * per;
    res.late_prefetches_per_step += static_cast<double>(m.late_prefetches) * per;
    res.prefetch_timely_share += m.prefetch_timely_share / static_cast<double>(N);
    res.hbm_peak_pct = std::max(res.hbm_peak_pct, m.hbm.peak_pct);
    red += r.reduction[g].reduction_ms;
    exposed += r.reduction[g].exposed_ms;
    reduced_steps += static_cast<double>(r.reduction[g].steps);
  }
  // Per step, the mean over GPUs, undilated (the reducer's figures are device-timed).
  const double per_step = reduced_steps > 0 ? 1.0 / reduced_steps / scale : 0;
  res.reduction_ms = red * per_step;
  res.reduction_exposed_ms = exposed * per_step;
  res.reduction_hidden_ms = res.reduction_ms - res.reduction_exposed_ms;
  res.exposed_share = red > 0 ? exposed / red : 0;
  double compute_ns = 0;
  for (const auto& u : r.seq) compute_ns += static_cast<double>(u.compute_ns);
  res.compute_ms = compute_ns / 1e6 / scale;
  // The peak was calibrated on the dilated sim: undilated, it is `scale` times faster.
  const double link = link_bytes_per_second * scale;
  // H2D and D2H are the link's two directions: each must fit.
  res.link_ms =
      link > 0 ? std::max(res.bytes_per_step, res.write_back_bytes_per_step) / link * 1e3 : 0;
  res.bound_ms = std::max(res.compute_ms, res.link_ms);
  res.belady_bound_ms =
      std::max(res.compute_ms, link > 0 ? res.belady_bytes_per_step / link * 1e3 : 0);
  res.step_over_bound = res.bound_ms > 0 ? res.step.p50 / res.bound_ms : 0;
}

/// How often each weight appears in the step's sequence: (distinct weights, fewest, most).
void count_uses(const std::vector<step_use>& seq, std::size_t tensors, train_result& res) {
  std::vector<std::size_t> uses(tensors, 0);
  for (const auto& u : seq) {
    if (u.activation) {
      ++res.activation_uses;
    } else {
      ++uses[u.tensor];
    }
  }
  res.schedule_length = seq.size();
  res.schedule_weights = static_cast<std::size_t>(
      std::count_if(uses.begin(), uses.end(), [](std::size_t x) { return x > 0; }));
  res.uses_min = *std::min_element(uses.begin(), uses.end());
  res.uses_max = *std::max_element(uses.begin(), uses.end());
}

}  // namespace

void run_modelled(device& dev, std::int64_t ns, stream_ref s) {
  dev.launch_host_func(
      [ns] { std::this_thread::sleep_until(clock_type::now() + std::chrono::nanoseconds(ns)); }, s);
}

std::vector<std::unique_ptr<device>> make_train_devices(const bench_config& cfg,
                                                        const train_options& o,
                                                        std::size_t extra_bytes) {
  device_options d;
  d.backend = "sim";
  d.sim_memory_bytes = cfg.hbm_budget_bytes + extra_bytes + (std::size_t{1} << 30);
  d.sim_link_gbps = o.link_gbps;
  d.sim_latency_us = o.latency_us;
  d.sim_timing_only = true;
  std::vector<std::unique_ptr<device>> devs;
  for (std::size_t g = 0; g < o.gpus; ++g) {
    d.ordinal = static_cast<int>(g);
    devs.push_back(make_bench_device(d));
  }
  return devs;
}

train_result run_train(const bench_config& cfg, const train_options& o) {
  HTP_EXPECTS(o.gpus >= 1 && o.batch >= 1 && o.seq_len >= 1, invalid_argument,
              "--train needs --gpus, --batch and --seq-len >= 1");
  train_result res;
  res.gpus = o.gpus;
  res.hbm_budget_bytes = cfg.hbm_budget_bytes;
  const std::size_t per_layer =
      static_cast<std::size_t>(o.batch) * static_cast<std::size_t>(o.seq_len) *
      static_cast<std::size_t>(cfg.model.hidden) * bytes_per_element(cfg.type);
  res.activation_bytes = per_layer * static_cast<std::size_t>(cfg.layers);
  res.activations_paged = o.page_activations;
  // Paged, the activations share the pager's budget: it must hold a layer's weights and its
  // activation at once; reserved, they are taken out of the budget first.
  const std::size_t reserved = o.page_activations ? 0 : res.activation_bytes;
  const std::size_t need =
      largest_layer_bytes(cfg) + 2 * cfg.slab_bytes + (o.page_activations ? per_layer : 0);
  if (cfg.hbm_budget_bytes < reserved + need) {
    res.skipped = true;
    res.skip_reason = o.page_activations
                          ? "less than a layer, its activation and two slabs"
                          : "the activations leave less than a layer and two slabs to the weights";
    return res;
  }
  res.paged_budget_bytes = (cfg.hbm_budget_bytes - reserved) / cfg.page_bytes * cfg.page_bytes;
  const std::vector<step_use> seq = step_sequence(cfg, o, o.page_activations);
  std::vector<std::uint64_t> tensor_bytes;
  for (int l = 0; l < cfg.layers; ++l) {
    for (const auto& t : layer_tensors(cfg.model))
      tensor_bytes.push_back(t.rows * t.cols * bytes_per_element(cfg.type));
  }
  count_uses(seq, tensor_bytes.size(), res);
  train_run r{cfg,
              o,
              seq,
              tensor_bytes,
              res.paged_budget_bytes,
              o.page_activations ? per_layer : 0,
              make_train_devices(cfg, o, largest_layer_bytes(cfg)),
              nullptr,
              {},
              {},
              {},
              {},
              {},
              0};
  std::vector<device*> ptrs;
  for (const auto& d : r.devs) ptrs.push_back(d.get());
  r.coll = make_sim_collectives(ptrs, static_cast<std::uint64_t>(o.interconnect_gbps * 1e9));
  r.step_ms.resize(o.gpus);
  r.reduction.resize(o.gpus);
  r.metrics.resize(o.gpus);
  r.err.resize(o.gpus);
  r.first_failed = o.gpus;
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < o.gpus; ++g) threads.emplace_back([&r, g] { run_gpu(r, g); });
  for (auto& t : threads) t.join();
  if (r.first_failed < o.gpus) std::rethrow_exception(r.err[r.first_failed]);
  // Belady's rule prices reads only; with activations written and dying in the budget it is no
  // bound on the weights' bytes, so it is computed for reserved activations alone.
  if (!o.page_activations) res.belady_bytes_per_step = belady_per_step(r, res.paged_budget_bytes);
  // The bound's link is the bench's: the copy peak calibrated once for the run (the modelled rate
  // less the per-copy latency, as the step's copies meet it).
  combine(r, res, static_cast<double>(cfg.link_peak_bytes_per_second));
  return res;
}

nlohmann::json to_json(const train_result& r, double budget_fraction) {
  nlohmann::json j{{"budget_fraction", budget_fraction},
                   {"hbm_budget_bytes", r.hbm_budget_bytes},
                   {"gpus", r.gpus},
                   {"skipped", r.skipped}};
  if (r.skipped) {
    j["reason"] = r.skip_reason;
    return j;
  }
  j["activation_bytes"] = r.activation_bytes;
  j["activations"] = r.activations_paged ? "paged" : "reserved";
  j["paged_budget_bytes"] = r.paged_budget_bytes;
  j["steps_ms"] = r.step_ms;
  j["step_ms"] = to_json(r.step);
  j["compute_ms_per_step"] = r.compute_ms;
  j["bytes_per_step"] = r.bytes_per_step;
  j["write_back_bytes_per_step"] = r.write_back_bytes_per_step;
  if (r.activations_paged) {  // Belady's rule prices reads only: no bound with writes in it
    j["belady_bytes_per_step"] = nullptr;
    j["bytes_over_belady"] = nullptr;
  } else {
    j["belady_bytes_per_step"] = r.belady_bytes_per_step;
    j["bytes_over_belady"] =
        r.belady_bytes_per_step > 0 ? r.bytes_per_step / r.belady_bytes_per_step : 0;
  }
  j["link_ms_per_step"] = r.link_ms;
  j["bound_ms"] = r.bound_ms;
  j["belady_bound_ms"] = r.belady_bound_ms;
  j["step_over_bound"] = r.step_over_bound;
  j["schedule"] = {{"length", r.schedule_length},          {"weights", r.schedule_weights},
                   {"uses_per_weight_min", r.uses_min},    {"uses_per_weight_max", r.uses_max},
                   {"activation_uses", r.activation_uses}, {"cyclic", true}};
  j["faults_per_step"] = r.faults_per_step;
  j["late_prefetches_per_step"] = r.late_prefetches_per_step;
  j["prefetch_timely_share"] = r.prefetch_timely_share;
  j["hbm_peak_pct"] = r.hbm_peak_pct;
  j["reduction"] = {
      {"ms_per_step", r.reduction_ms},
      {"hidden_ms", r.reduction_hidden_ms},
      {"exposed_ms", r.reduction_exposed_ms},
      {"exposed_share", r.exposed_share},
      {"exposed_share_of_step", r.step.p50 > 0 ? r.reduction_exposed_ms / r.step.p50 : 0}};
  return j;
}

void print_train_table(const std::vector<train_result>& results) {
  std::printf("\n  training step (forward then backward, each weight twice), timing-only sim\n"
              "  %10s %5s %10s %10s %10s %8s %9s %9s %10s %8s %9s %8s\n",
              "budget", "acts", "step p50", "compute", "bound", "step/bd", "GB in", "GB out",
              "Belady GB", "x Belady", "reduce", "exposed");
  for (const auto& r : results) {
    if (r.skipped) {
      std::printf("  %8.2fGB skipped: %s\n", static_cast<double>(r.hbm_budget_bytes) / 1e9,
                  r.skip_reason.c_str());
      continue;
    }
    char belady[2][16] = {"-", "-"};  // paged activations: no Belady bound
    if (!r.activations_paged && r.belady_bytes_per_step > 0) {
      std::snprintf(belady[0], sizeof belady[0], "%.3f", r.belady_bytes_per_step / 1e9);
      std::snprintf(belady[1], sizeof belady[1], "%.3f",
                    r.bytes_per_step / r.belady_bytes_per_step);
    }
    std::printf(
        "  %8.2fGB %5s %8.2fms %8.2fms %8.2fms %8.3f %9.3f %9.3f %10s %8s %7.2fms %7.1f%%\n",
        static_cast<double>(r.hbm_budget_bytes) / 1e9, r.activations_paged ? "paged" : "held",
        r.step.p50, r.compute_ms, r.bound_ms, r.step_over_bound, r.bytes_per_step / 1e9,
        r.write_back_bytes_per_step / 1e9, belady[0], belady[1], r.reduction_ms,
        100 * r.exposed_share);
  }
}

}  // namespace htp::bench
