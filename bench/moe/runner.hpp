// htp-moe-bench's runs: one paging policy over a mixture-of-experts model and a routing trace, and
// the offline Belady oracle on the same accesses.
#pragma once

#include <htp/pager.hpp>

#include "moe/routing.hpp"
#include "shared/model_shapes.hpp"
#include "stream/compute.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace htp::bench {

/// What every policy of a run shares.
struct moe_config {
  model_shape model;
  dtype type = dtype::bf16;
  int layers = 4, tokens = 1, warmup = 8, steps = 32;  ///< trace steps = warmup + steps
  std::size_t hbm_budget_bytes = 0;                    ///< whole pages
  std::size_t slab_bytes = std::size_t{64} << 20, page_bytes = std::size_t{64} << 10;
  std::size_t chunk_bytes = std::size_t{2} << 20;
  std::uint64_t link_peak_bytes_per_second = 0;
  double popularity_half_life = pager_config{}.popularity_half_life;
};

/// The model's tensors, numbered layer by layer in layer_tensors order: per layer, the shared ones
/// (the router last) and each expert's matrices.
struct moe_layout {
  std::vector<std::uint64_t> bytes;  ///< requested bytes of tensor i
  struct layer {
    std::vector<std::size_t> shared;                ///< in execution order, the router last
    std::vector<std::vector<std::size_t>> experts;  ///< [expert] -> its matrices
  };
  std::vector<layer> layers;
};

/// The layout of cfg's layers. @throws htp::invalid_argument for a model without experts.
moe_layout layout_of(const moe_config& cfg);

/// The tensors step `step` acquires, in order: per layer its shared tensors, then the matrices of
/// the experts its tokens route to (ascending expert).
std::vector<std::size_t> step_accesses(const moe_layout& layout, const routing_trace& trace,
                                       int step);

/// How a policy pages the experts.
enum class moe_policy {
  today,       ///< shared tensors by schedule; experts demand-faulted, default eviction
  lru,         ///< as today, every eviction LRU
  popularity,  ///< as today, plus routed groups (set_routed_group) and expect() after the router
};
const char* to_string(moe_policy p) noexcept;
/// @throws htp::invalid_argument naming the unknown policy.
moe_policy parse_moe_policy(const std::string& name);

struct moe_result {
  std::string name;
  bool skipped = false;
  std::string skip_reason;
  std::vector<double> step_ms;                              ///< timed steps
  double step_p50_ms = 0, step_p99_ms = 0, compute_ms = 0;  ///< compute: per step, median
  /// The pager's counters over the timed steps (metrics_delta; levels as at their end).
  pager_metrics counters;
  double prefetch_timely_share = 1;
  double lateness_p50_ms = 0, lateness_p99_ms = 0;
  std::uint64_t lateness_count = 0;
  double hbm_mean_pct = 0;
  std::string metrics_json;  ///< the pager's metrics at the end (the timed steps: reset before)
};

/// Runs one policy: a fresh pager with cfg's budget, the layers registered, the shared tensors
/// scheduled (cyclic), warm-up then timed steps following `trace`.
moe_result run_moe_policy(device& dev, const moe_config& cfg, moe_policy pol,
                          layer_compute& compute, const routing_trace& trace);

/// The offline oracle: Belady's rule on the realised accesses (every step of `trace`, warm-up
/// included) through the pager's capacity (cfg.hbm_budget_bytes, tensors page-rounded as htp
/// stores them), counting the requested bytes of the misses in the timed steps.
std::uint64_t oracle_bytes(const moe_config& cfg, const moe_layout& layout,
                           const routing_trace& trace);

/// The online reference: the best fixed set in hindsight. The tensors with the most accesses per
/// byte over the whole trace (its realised frequencies) stay resident, as many as fit beside room
/// for the largest tensor; every other tensor passes through that leftover room, LRU. Counts the
/// requested bytes of the misses in the timed steps. For independent draws from fixed
/// popularities no online rule does much better than keeping the most probable set, so the gap
/// between this and the oracle is what knowing the future is worth.
std::uint64_t best_fixed_set_bytes(const moe_config& cfg, const moe_layout& layout,
                                   const routing_trace& trace);

/// The online counting reference: least frequently used, offline on the same accesses at the
/// pager's capacity. Counts are of accesses so far (no hindsight, no decay); a miss evicts the
/// resident tensors with the fewest (ties: least recent) until it fits. What learning the
/// popularity from the trace itself can reach, with room for nothing but the tensor coming in.
std::uint64_t lfu_bytes(const moe_config& cfg, const moe_layout& layout,
                        const routing_trace& trace);

}  // namespace htp::bench
