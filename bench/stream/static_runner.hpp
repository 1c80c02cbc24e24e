// htp-stream-bench --static: the model's decode step as a static plan (htp/static_step.hpp),
// captured once and replayed, beside the dynamic pager's policies; and the round-robin k-slot
// scheme engines run today (vLLM's prefetch offloader) as the baseline, run by the same step.
#pragma once

#include "runner.hpp"

#include <string>
#include <vector>

namespace htp::bench {

/// One static scheme: htp's plan (round_robin_k 0) or round-robin through k layer slots; raw or
/// with its weights coded.
struct static_scheme {
  std::string name;
  std::size_t round_robin_k = 0;
  bool compressed = false;
};

/// static, static+z, round-robin-k1, -k2, -k4.
std::vector<static_scheme> static_schemes();

/// Runs `scheme` at cfg's budget: the plan made from per-position compute times measured by one
/// eager step (each position synchronized and timed), the step captured with the compute's
/// kernels, then cfg.warmup_steps and cfg.steps replays, each timed from launch to completion.
/// Fills step_ms, bytes and wire bytes per step, bound_ms (the plan's own bound: max(compute,
/// streamed bytes / link)), bound_lower_ms (the budget's: htp::static_step_bound_ns) and
/// metrics_json (the plan: predicted step, arena, ring, resident bytes).
/// @throws as plan_static / round_robin_plan / static_step.
policy_result run_static(device& dev, const bench_config& cfg, const static_scheme& scheme,
                         layer_compute& compute, const host_weights& weights,
                         const progress_fn& progress);

/// The static schemes' rows side by side: step p50, predicted, its own bound, the budget's bound,
/// step / budget bound, bytes per step. Never throws (printf).
void print_static_table(const std::vector<policy_result>& results);

}  // namespace htp::bench
