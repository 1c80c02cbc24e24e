// htp-stream-bench --static (static_runner.hpp).
#include "static_runner.hpp"

#include <htp/codec.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>
#include <htp/static_step.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace htp::bench {
namespace {

/// The model's layers as a static step's input and sources: one position per tensor, in the order
/// the layer's kernels read them (module granularity), the bytes in pinned host memory.
class static_model {
 public:
  static_model(device& dev, const bench_config& cfg, const host_weights& weights, bool coded)
      : dev_(dev) {
    const auto shapes = layer_tensors(cfg.model);
    const bool timing_only = dev.properties().timing_only;
    in.link_bytes_per_second =
        static_cast<double>(cfg.rate_bytes_per_second.value_or(cfg.link_peak_bytes_per_second));
    // The timing-only sim's modelled decode rate; elsewhere measure_decode_rate replaces it.
    in.decode_bytes_per_second = static_cast<double>(sim_config{}.decode_bytes_per_second);
    in.hbm_budget = cfg.hbm_budget_bytes;
    std::vector<std::vector<std::uint8_t>> frames;
    for (int l = 0; l < cfg.layers; ++l) {
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        const auto& e = weights.at(l, i);
        static_tensor t{"layers." + std::to_string(l) + "." + shapes[i].name, e.bytes};
        if (coded && timing_only) {
          t.wire_bytes =
              std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(e.bytes) *
                                                                cfg.modelled_compression_ratio));
        } else if (coded) {
          const weight_format f =
              cfg.type == dtype::fp16 ? weight_format::fp16 : weight_format::bf16;
          frames.push_back(encode_weights(e.data, e.bytes, f));
          t.wire_bytes = frames.back().size();
        }
        in.positions.push_back({{in.tensors.size()}, 0.0});
        layer_of.push_back(static_cast<std::size_t>(l));
        in.tensors.push_back(t);
        views.push_back({{e.data, e.bytes, false},
                         shapes[i].rows,
                         shapes[i].cols,
                         e.sums.sum,
                         e.sums.head,
                         e.sums.tail,
                         !timing_only});
      }
    }
    place_sources(weights, frames, timing_only, coded);
  }
  ~static_model() {
    if (block_ != nullptr) dev_.deallocate(memory_kind::pinned_host, block_, block_bytes_);
  }
  static_model(const static_model&) = delete;
  static_model& operator=(const static_model&) = delete;

  static_plan_input in;
  std::vector<const void*> sources;
  std::vector<weight_view> views;     // per tensor; span.data replaced by the step's address
  std::vector<std::size_t> layer_of;  // per position: its layer (round_robin_plan's layers)

 private:
  // Raw: the run's shared pinned weights. Coded: the frames in one pinned block of our own.
  // Timing-only: one reserved block (no bytes) both point into.
  void place_sources(const host_weights& weights, std::vector<std::vector<std::uint8_t>>& frames,
                     bool timing_only, bool coded) {
    if (!timing_only && !coded) {
      for (const auto& v : views) sources.push_back(v.span.data);
      (void)weights;
      return;
    }
    std::size_t largest = 0;
    for (const auto& f : frames) block_bytes_ += (f.size() + 4095) / 4096 * 4096;
    for (const auto& t : in.tensors) largest = std::max(largest, t.bytes);
    if (timing_only) block_bytes_ = largest;
    block_ = static_cast<std::uint8_t*>(dev_.allocate(memory_kind::pinned_host, block_bytes_));
    std::size_t at = 0;
    for (std::size_t t = 0; t < in.tensors.size(); ++t) {
      if (timing_only) {
        sources.push_back(block_);
        continue;
      }
      std::memcpy(block_ + at, frames[t].data(), frames[t].size());
      sources.push_back(block_ + at);
      at += (frames[t].size() + 4095) / 4096 * 4096;
    }
  }

  device& dev_;
  std::uint8_t* block_ = nullptr;
  std::size_t block_bytes_ = 0;
};

/// The layer compute's kernels for position p, reading the step's fixed address.
void run_position(layer_compute& compute, static_model& m, static_step& step, int tokens,
                  std::size_t p, stream_ref s) {
  std::vector<weight_view> views;
  for (const std::size_t t : m.in.positions[p].tensors) {
    views.push_back(m.views[t]);
    views.back().span.data = step.address(t, p);
  }
  compute.run_layer(views, tokens, s);
}

/// One eager step of `plan`, each position synchronized and timed: its compute, in ns.
std::vector<double> measure_compute(device& dev, layer_compute& compute, static_model& m,
                                    const static_plan& plan, int tokens) {
  static_step step(dev, m.in, plan, m.sources);
  step.prime();
  stream s(dev);
  compute.take_compute_ms();
  std::vector<double> ns;
  for (std::size_t p = 0; p < m.in.positions.size(); ++p) {
    step.begin(p, s);
    run_position(compute, m, step, tokens, p, s);
    step.end(p, s);
    s.synchronize();
    ns.push_back(compute.take_compute_ms() * 1e6);
  }
  return ns;
}

/// The decode rate of the largest coded tensor, timed on the device (decoded bytes per second: a
/// GPU kernel on cuda, the CPU reference decoder on a sim that moves bytes); a timing-only sim
/// keeps its modelled rate.
void measure_decode_rate(device& dev, static_model& m) {
  if (dev.properties().timing_only) return;  // modelled there: keep the sim's rate
  std::size_t t = m.in.tensors.size();
  for (std::size_t i = 0; i < m.in.tensors.size(); ++i) {
    if (m.in.tensors[i].coded() &&
        (t == m.in.tensors.size() || m.in.tensors[i].bytes > m.in.tensors[t].bytes))
      t = i;
  }
  if (t == m.in.tensors.size()) return;
  const static_tensor& x = m.in.tensors[t];
  void* wire = dev.allocate(memory_kind::device, x.wire_bytes);
  void* out = dev.allocate(memory_kind::device, x.bytes);
  stream s(dev);
  const event_ref a = dev.create_timed_event(), b = dev.create_timed_event();
  dev.copy_async(wire, m.sources[t], x.wire_bytes, copy_direction::host_to_device, s);
  dev.decode_weights_async(wire, x.wire_bytes, out, x.bytes, s);  // warm-up
  dev.record(a, s);
  for (int i = 0; i < 5; ++i) dev.decode_weights_async(wire, x.wire_bytes, out, x.bytes, s);
  dev.record(b, s);
  s.synchronize();
  const auto ns = dev.elapsed(a, b);
  if (ns && ns->count() > 0)
    m.in.decode_bytes_per_second =
        5.0 * static_cast<double>(x.bytes) * 1e9 / static_cast<double>(ns->count());
  dev.destroy_event(a);
  dev.destroy_event(b);
  dev.deallocate(memory_kind::device, wire, x.wire_bytes);
  dev.deallocate(memory_kind::device, out, x.bytes);
}

/// The H2D rate and per-copy cost a step's copies see, fitted to whole-tensor copies of the
/// smallest and the largest tensor timed on the device (t = overhead + bytes / rate), so the
/// plan predicts with the link as the step meets it.
void measure_link(device& dev, static_model& m) {
  std::size_t small = 0, large = 0;
  for (std::size_t t = 0; t < m.in.tensors.size(); ++t) {
    if (m.in.tensors[t].link_bytes() < m.in.tensors[small].link_bytes()) small = t;
    if (m.in.tensors[t].link_bytes() > m.in.tensors[large].link_bytes()) large = t;
  }
  const std::size_t bytes[2] = {m.in.tensors[small].link_bytes(), m.in.tensors[large].link_bytes()};
  void* dst = dev.allocate(memory_kind::device, bytes[1]);
  stream s(dev);
  const event_ref a = dev.create_timed_event(), b = dev.create_timed_event();
  double ns[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const void* src = m.sources[i == 0 ? small : large];
    dev.copy_async(dst, src, bytes[i], copy_direction::host_to_device, s);  // warm-up
    dev.record(a, s);
    for (int k = 0; k < 4; ++k)
      dev.copy_async(dst, src, bytes[i], copy_direction::host_to_device, s);
    dev.record(b, s);
    s.synchronize();
    ns[i] =
        static_cast<double>(dev.elapsed(a, b).value_or(std::chrono::nanoseconds(0)).count()) / 4;
  }
  dev.destroy_event(a);
  dev.destroy_event(b);
  dev.deallocate(memory_kind::device, dst, bytes[1]);
  if (ns[1] <= ns[0] || bytes[1] <= bytes[0]) return;  // nothing to fit: keep the calibration
  const double per_byte = (ns[1] - ns[0]) / static_cast<double>(bytes[1] - bytes[0]);
  m.in.link_bytes_per_second = 1e9 / per_byte;
  m.in.copy_overhead_ns = std::max(0.0, ns[0] - static_cast<double>(bytes[0]) * per_byte);
}

static_plan plan_of(const static_model& m, const static_scheme& scheme) {
  return scheme.round_robin_k != 0 ? round_robin_plan(m.in, scheme.round_robin_k, m.layer_of)
                                   : plan_static(m.in);
}

std::string plan_json(const static_model& m, const static_plan& plan) {
  std::size_t resident = 0;
  for (std::size_t t = 0; t < m.in.tensors.size(); ++t) {
    if (plan.resident_offset[t] != static_plan::npos) resident += m.in.tensors[t].bytes;
  }
  return nlohmann::json{{"predicted_step_ms", plan.predicted.step_ns / 1e6},
                        {"plan_bound_ms", plan.predicted.plan_bound_ns() / 1e6},
                        {"arena_bytes", plan.arena_bytes},
                        {"ring_bytes", plan.ring_bytes},
                        {"resident_bytes", resident},
                        {"streamed_wire_bytes", plan.streamed_bytes},
                        {"uses", plan.uses.size()}}
      .dump();
}

}  // namespace

std::vector<static_scheme> static_schemes() {
  return {{"static", 0, false},
          {"static+z", 0, true},
          {"round-robin-k1", 1, false},
          {"round-robin-k2", 2, false},
          {"round-robin-k4", 4, false}};
}

policy_result run_static(device& dev, const bench_config& cfg, const static_scheme& scheme,
                         layer_compute& compute, const host_weights& weights,
                         const progress_fn& progress) {
  static_model m(dev, cfg, weights, scheme.compressed);
  if (!cfg.rate_bytes_per_second) measure_link(dev, m);  // a budgeted rate is the plan's rate
  if (scheme.compressed) measure_decode_rate(dev, m);
  // Compute per position, measured on a first plan made without it.
  const auto times = measure_compute(dev, compute, m, plan_of(m, scheme), cfg.tokens);
  for (std::size_t p = 0; p < times.size(); ++p) m.in.positions[p].compute_ns = times[p];
  const static_plan plan = plan_of(m, scheme);
  static_step step(dev, m.in, plan, m.sources);
  step.prime();
  stream s(dev);
  const graph g = step.capture(
      s, [&](std::size_t p, stream_ref cs) { run_position(compute, m, step, cfg.tokens, p, cs); });
  policy_result r;
  r.name = scheme.name;
  r.compressed = scheme.compressed;
  r.hbm_budget_bytes = cfg.hbm_budget_bytes;
  r.granularity = "module";
  r.lookahead = "static";
  for (int i = 0; i < cfg.warmup_steps + cfg.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step.launch(g, s);
    s.synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= cfg.warmup_steps) {
      r.step_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    if (progress) progress(scheme.name, i + 1, cfg.warmup_steps + cfg.steps);
  }
  r.step = summarize(r.step_ms);
  r.mismatches = compute.take_mismatches();
  const auto failed = step.take_decode_failures();
  r.mismatches += failed.size();
  for (const auto& use : plan.uses) {
    if (use.freed_by < 0) continue;
    for (const std::size_t t : use.tensors)
      r.bytes_per_step += static_cast<double>(m.in.tensors[t].bytes);
  }
  r.wire_bytes_per_step = static_cast<double>(plan.streamed_bytes);
  r.wire_ratio = r.bytes_per_step > 0 ? r.wire_bytes_per_step / r.bytes_per_step : 1;
  r.bound_ms = plan.predicted.plan_bound_ns() / 1e6;
  r.bound_lower_ms = static_step_bound_ns(m.in) / 1e6;
  r.compute_ms = plan.predicted.compute_ns / 1e6;
  r.transfer_ms = plan.predicted.link_ns / 1e6;
  r.decode_ms_per_step = plan.predicted.decode_ns / 1e6;
  r.overlap_efficiency = r.step.p50 > 0 ? r.bound_ms / r.step.p50 : 0;
  r.metrics_json = plan_json(m, plan);
  return r;
}

void print_static_table(const std::vector<policy_result>& results) {
  std::printf("\n  static plans (captured once, replayed): step p50 against the plan's prediction"
              " and two bounds\n"
              "  %-16s %10s %10s %10s %10s %8s %10s %8s\n",
              "scheme", "step p50", "predicted", "own bound", "budget bd", "step/bd", "GB/step",
              "wire");
  for (const auto& r : results) {
    if (r.lookahead != "static") continue;
    if (r.skipped) {
      std::printf("  %-16s skipped: %s\n", r.name.c_str(), r.skip_reason.c_str());
      continue;
    }
    const auto plan = nlohmann::json::parse(r.metrics_json);
    std::printf("  %-16s %8.2fms %8.2fms %8.2fms %8.2fms %8.3f %10.3f %8.2f\n", r.name.c_str(),
                r.step.p50, plan.value("predicted_step_ms", 0.0), r.bound_ms, r.bound_lower_ms,
                r.bound_lower_ms > 0 ? r.step.p50 / r.bound_lower_ms : 0, r.bytes_per_step / 1e9,
                r.wire_ratio);
  }
}

}  // namespace htp::bench
