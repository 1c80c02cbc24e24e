// htp-stream-bench --train: the design's training step on a timing-only sim. A step is the forward
// order over every layer's weights followed by the backward order (the reverse), each weight
// acquired twice, declared to the pager as its cyclic schedule so prefetch and Belady eviction see
// the whole step. Compute per module is modelled from FLOPs (forward 2 x params x tokens, backward
// twice that). With N GPUs (data parallel), each layer's gradient is all-reduced on the GPU's
// reduction stream (htp::gradient_reducer) as soon as its backward ends, overlapping the next
// layer's backward, from two gradient buffers used in turn (gradient_slots.hpp); the step ends
// when the last reduction has. Activations (batch x seq_len x hidden x bytes per layer, the
// checkpointed layer inputs) are either reserved out of the budget and stay in HBM, or, with
// page_activations, paged: one tensor_kind::activation per layer, in the schedule, written in its
// layer's forward pass (a fresh acquire, released dirty), read in its backward pass and dead at
// its last use (release_last_use: never written back).
#pragma once

#include "runner.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace htp::bench {

/// The training run's own settings (rates already dilated by the sim's time scale).
struct train_options {
  int batch = 1;
  int seq_len = 2048;                    ///< tokens per sequence: a step processes whole sequences
  double flops_per_second = 989e12;      ///< modelled device FLOP rate (dilated)
  std::size_t gpus = 1;                  ///< data-parallel ranks, one sim device each
  double link_gbps = 4, latency_us = 5;  ///< each sim device's modelled host link (dilated)
  double interconnect_gbps = 0;          ///< sim collectives' modelled rate (dilated); 0: free
  double time_scale = 1;                 ///< sim time dilation: times are divided by it again
  bool page_activations = false;         ///< activations paged with the weights, not reserved
};

/// One budget's training run: its step times, bytes paged against Belady's on the same sequence,
/// the bound, and the gradient reductions' overlap with compute.
struct train_result {
  bool skipped = false;
  std::string skip_reason;
  std::size_t hbm_budget_bytes = 0;    ///< per GPU, as asked
  std::size_t activation_bytes = 0;    ///< every layer's activation together
  bool activations_paged = false;      ///< in the pager's budget (else reserved out of it)
  std::size_t paged_budget_bytes = 0;  ///< what the pager gets: the rest, in whole pages
  std::size_t gpus = 1;
  std::vector<double> step_ms;  ///< per timed step: the slowest GPU's
  summary_ms step;
  double compute_ms = 0;                 ///< modelled compute per step (forward + backward)
  double bytes_per_step = 0;             ///< paged in per timed step, mean over GPUs
  double write_back_bytes_per_step = 0;  ///< written back (live activations evicted)
  double belady_bytes_per_step = 0;      ///< Belady's rule on the step's sequence, same capacity
  double link_ms = 0;          ///< the busier direction's bytes per step / the calibrated link peak
  double bound_ms = 0;         ///< max(compute, link_ms)
  double belady_bound_ms = 0;  ///< max(compute, belady_bytes_per_step / link)
  double step_over_bound = 0;  ///< step p50 / bound_ms
  std::size_t schedule_length = 0;         ///< acquires per step
  std::size_t schedule_weights = 0;        ///< distinct weights in it
  std::size_t uses_min = 0, uses_max = 0;  ///< acquires of each weight per step
  std::size_t activation_uses = 0;         ///< activation acquires per step (2 per layer, paged)
  double faults_per_step = 0, late_prefetches_per_step = 0, prefetch_timely_share = 1;
  double reduction_ms = 0;          ///< per step: the all-reduces' time on the reduction stream
  double reduction_hidden_ms = 0;   ///< of it, under compute
  double reduction_exposed_ms = 0;  ///< the step's wait for reductions after its last backward
  double exposed_share = 0;         ///< exposed / reduction time (0 when no reduction time)
  double hbm_peak_pct = 0;
};

/// The modelled compute of `ns` on `s` (sim): the stream is busy for that long (a host function
/// sleeping on the stream's thread). Stream-ordered on `s`.
void run_modelled(device& dev, std::int64_t ns, stream_ref s);

/// The run's `o.gpus` timing-only sim devices, each with `o`'s modelled link and room for
/// cfg.hbm_budget_bytes + `extra_bytes` + 1 GiB.
std::vector<std::unique_ptr<device>> make_train_devices(const bench_config& cfg,
                                                        const train_options& o,
                                                        std::size_t extra_bytes);

/// Runs cfg's model (cfg.layers, cfg.hbm_budget_bytes per GPU) through warm-up and timed training
/// steps on `o.gpus` fresh timing-only sim devices, one thread each, cfg.link_peak_bytes_per_second
/// as the link. Times in the result are undilated. @throws htp::invalid_argument for a budget that
/// leaves no room after the activations (kept as skipped instead), and the first GPU's failure.
train_result run_train(const bench_config& cfg, const train_options& o);

/// One result as JSON (the "train" section's rows).
nlohmann::json to_json(const train_result& r, double budget_fraction);

/// The results side by side on stdout. Never throws (printf).
void print_train_table(const std::vector<train_result>& results);

}  // namespace htp::bench
