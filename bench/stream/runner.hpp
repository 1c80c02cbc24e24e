// One policy of the streaming benchmark: a fresh pager over the same device, the model's layers
// registered, warm-up steps, then timed steps. Decode or prefill steps of a model runner: each
// step walks the layers (acquire the layer's weights, compute, release), optionally reading and
// appending to a KV cache that grows per token as mutable tensors.
#pragma once

#include <htp/pager.hpp>

#include "compute.hpp"
#include "shared/model_shapes.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace htp::bench {

/// How a policy drives the pager.
struct policy {
  std::string name;
  eviction_rule rule = eviction_rule::automatic;
  unsigned lookahead = 0;
  bool schedule = false;         ///< declare the layer order (set_schedule)
  bool wait_each_fault = false;  ///< block the host on each fault (synchronous offloading)
  bool all_resident = false;     ///< HBM budget = the whole model (run only when it fits)
  prefetch_mode prefetch = prefetch_mode::min_page_ins;  ///< what a prefetch may evict
  /// How far ahead the schedule is prefetched: `lookahead` tensors (count) or as far as the link
  /// needs to cover the compute (automatic, pager_config::lookahead).
  lookahead_mode mode = lookahead_mode::count;
};

/// The policies compared side by side: all-resident, on-demand, LRU with lookahead, and
/// schedule-aware lookahead k = 1 and 2 (count mode) and automatic (schedule-auto).
std::vector<policy> standard_policies();

struct bench_config {
  model_shape model;
  dtype type = dtype::bf16;
  int layers = 0;  ///< layers run (<= model.layers, real layer shape)
  int tokens = 1;  ///< tokens per step (decode batch, or prefill length)
  int steps = 4;   ///< timed steps
  int warmup_steps = 1;
  std::size_t hbm_budget_bytes = 0;
  std::size_t slab_bytes = std::size_t{64} << 20;
  std::size_t page_bytes = std::size_t{64} << 10;  ///< allocation unit of both tiers
  std::size_t chunk_bytes = std::size_t{2} << 20;
  std::optional<std::uint64_t> rate_bytes_per_second;  ///< unset: uncapped
  std::uint64_t link_peak_bytes_per_second = 0;        ///< calibrated once for all policies
  int kv_context_tokens = 0;                           ///< initial KV context; 0 = no KV cache
  int kv_block_tokens = 256;                           ///< tokens per KV block tensor
  std::chrono::milliseconds latency_budget{200};
  std::uint64_t seed = 1;
  /// How a runner acquires a layer's weights: false, one acquire per parameter just before its
  /// kernel (module granularity, as htp.torch.offload does); true, the layer's weights as ONE
  /// acquire(list) before its first kernel and one release(list) after its last (layer).
  bool layer_lists = false;
  /// Weights are drawn as the codec bench's Llama-like mixture (bench/common/synthetic_weights.hpp)
  /// instead of fill patterns, so compression sees a realistic ratio (--compress).
  bool synthetic_weights = false;
  /// Register the weights compressed (pager::register_tensor with a weight_format).
  bool compress = false;
  /// pager_config::modelled_compression_ratio (timing-only devices).
  double modelled_compression_ratio = 0.68;
};

/// "module" or "layer": the granularity cfg acquires weights at.
inline const char* granularity_of(const bench_config& cfg) {
  return cfg.layer_lists ? "layer" : "module";
}

struct summary_ms {
  double p50 = 0, p99 = 0, p999 = 0, max = 0,
         mean = 0;  ///< p999: the 99.9th percentile (nearest rank)
};

struct policy_result {
  std::string name;
  bool skipped = false;
  std::string skip_reason;
  std::size_t hbm_budget_bytes = 0;
  std::vector<double> step_ms;  ///< timed steps
  summary_ms step;
  bool meets_budget = false;  ///< step p99 within the latency budget
  double latency_budget_ms = 0;
  summary_ms fault;               ///< a fault's copy alone: submission to bytes in HBM (histogram)
  fault_wait_summary fault_wait;  ///< the mission's number: acquire call to bytes usable (exact)
  double stall_ms_per_step = 0;   ///< compute stream waiting on htp, measured on the device
  std::uint64_t stalled_acquires = 0;  ///< acquires the compute stream waited >= 10 us for
  summary_ms stall;               ///< their device-side waits: when the stream needed the bytes to
                                  ///< when they were usable (exact quantiles)
  double host_blocked_share = 0;  ///< host time blocked in acquire / step wall time
  double min_bytes_per_step = 0;  ///< MIN's bytes per step, or a lower bound on them (unequal
                                  ///< sizes: total - capacity); -1 n/a (MoE routing, KV growth)
  /// Belady's rule (farthest next use) simulated on the realised access sequence of a step (the
  /// acquires the run made, repeated cyclically) at the policy's budget: exact bytes; -1 n/a.
  double belady_bytes_per_step = 0;
  double bytes_per_step = 0;           ///< bytes paged in per timed step
  double bound_ms = 0;                 ///< max(compute, belady_bytes_per_step / link peak)
  double bound_lower_ms = 0;           ///< max(compute, min_bytes_per_step / link peak)
  std::string granularity = "module";  ///< module or layer (bench_config::layer_lists)
  std::string lookahead = "count";     ///< the pager's lookahead_mode: count or automatic
  double prefetch_timely_share = 1;    ///< pager_metrics::prefetch_timely_share, timed steps
  summary_ms prefetch_lateness;        ///< pager_metrics::prefetch_lateness (ms), timed steps
  std::uint64_t prefetch_lateness_count = 0;
  /// The pager's counters over the timed steps: metrics_delta of its metrics at their end and at
  /// their start (levels and summaries as at the end).
  pager_metrics counters;
  double fault_rate_per_ms = 0;  ///< (faults + late prefetches) / timed milliseconds
  double hbm_peak_pct = 0, hbm_mean_pct = 0;
  double h2d_gbps = 0;             ///< bytes moved H2D in the timed steps / their wall time
  double link_utilization = 0;     ///< h2d_gbps / calibrated link peak
  double compute_ms = 0;           ///< per step, median
  double transfer_ms = 0;          ///< per step (H2D busy), median
  double overlap_efficiency = 0;   ///< max(compute, transfer) / step time, median over steps
  std::uint64_t mismatches = 0;    ///< weight bytes that failed verification (sim)
  bool compressed = false;         ///< weights registered compressed (--compress)
  double wire_bytes_per_step = 0;  ///< bytes on the link per timed step (= bytes_per_step raw)
  double wire_ratio = 1;           ///< the model's wire / logical bytes as registered
  /// max(compute, MIN's bytes x wire_ratio / link peak): the bound a compressed run is held to.
  double wire_bound_ms = 0;
  double decode_ms_per_step = 0;      ///< device time of the decodes per timed step
  double effective_logical_gbps = 0;  ///< decoded bytes / decode-path busy time (engine)
  std::string metrics_json;           ///< the pager's full metrics at the end
};

/// Progress callback: (policy name, step done, steps total).
using progress_fn = std::function<void(const std::string&, int, int)>;

/// p50 / p99 (nearest rank) / max / mean of a sample, in its unit.
summary_ms summarize(std::vector<double> v);

/// The model's weights in pinned host memory of `dev`, filled from their seeds and summed once per
/// run, then lent to each policy's pager (add_host_region, register_tensor_at) instead of being
/// pinned, filled and summed again for every policy (about 7 GB and 8-12 s each on a GPU machine).
/// Empty on a timing-only device (no bytes). Not thread-safe; lives longer than every pager using
/// it.
class host_weights {
 public:
  /// One tensor: where its bytes are and what they sum to.
  struct entry {
    unsigned char* data = nullptr;
    std::size_t bytes = 0;
    weight_sums sums;
  };
  /// Allocates and fills every layer's tensors (layer-major, in layer_tensors order).
  /// @throws htp::out_of_memory when the host cannot pin them.
  host_weights(device& dev, const bench_config& cfg);
  ~host_weights();
  host_weights(const host_weights&) = delete;
  host_weights& operator=(const host_weights&) = delete;

  /// Tensor `i` of layer `l`; null data on a timing-only device.
  const entry& at(int l, std::size_t i) const {
    return entries_[static_cast<std::size_t>(l) * per_layer_ + i];
  }
  /// The pinned block (null on a timing-only device) and its size, to lend to a pager.
  void* block() const noexcept { return block_; }
  std::size_t block_bytes() const noexcept { return bytes_; }

 private:
  device& dev_;
  void* block_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t per_layer_ = 0;
  std::vector<entry> entries_;
};

/// Runs one policy over `weights` (made once for the run with this cfg's model and layers): a fresh
/// pager, the model and KV cache registered, warm-up then timed steps, and their results (skipped
/// when all-resident does not fit the device's free memory). `trace_path` non-empty: trace it and
/// write the Chrome JSON there.
policy_result run_policy(device& dev, const bench_config& cfg, const policy& pol,
                         layer_compute& compute, const host_weights& weights,
                         const std::string& trace_path, const progress_fn& progress);

/// Undoes sim time dilation (a run made `scale` times slower than modelled): times / scale, rates
/// per unit time x scale, the budget verdict taken again. Shares and byte counts are unchanged;
/// metrics_json stays as measured (dilated). scale 1: nothing changes.
void undilate(policy_result& r, double scale);

/// Bytes of the weights of the layers run (what paging moves per step when nothing stays).
std::uint64_t streamed_weight_bytes(const bench_config& cfg);
/// Bytes of the largest single layer's working set (shared tensors + the active experts).
std::uint64_t largest_layer_bytes(const bench_config& cfg);
/// Bytes the KV cache reaches by the end of the run.
std::uint64_t kv_bytes_at_end(const bench_config& cfg);

}  // namespace htp::bench
