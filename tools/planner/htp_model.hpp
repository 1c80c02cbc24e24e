// The planner's model of what htp itself does with a model, per GPU: which layers it keeps
// device-resident, which tensors Belady's rule pages in each step through the HBM left over (every
// tensor rounded to htp's pages), how long the link takes (chunked copies, each with a fixed cost,
// under the token bucket's cap), and how the copies and the compute stream wait on each other (a
// copy into evicted memory waits for the last kernel that read it). It replays one GPU's steps as
// a small event timeline, so its step time can be held against the timing-only simulation
// (scripts/plan-check.py) and, where a GPU ran it, the GPU. The formulas: docs/planner.md.
#pragma once

#include "planner/planner.hpp"

#include <cstdint>
#include <string>

namespace htp::bench {

/// How the layers are placed in HBM.
enum class placement {
  paged,     ///< every layer paged through the HBM budget (the stream bench's single-GPU policies)
  resident,  ///< as many layers' shards device-resident as fit beside a three-layer paging window,
             ///< the rest paged, spread among them (the node bench's --resident, the case study)
};

/// How the GPUs of the node share a layer.
enum class strategy {
  tensor_parallel,  ///< each GPU holds 1/gpus of every layer; an all-reduce per layer
  swap_and_shard,   ///< each GPU holds 1/gpus of every layer as a shard; each layer is gathered
                    ///< whole (all-gather from the peers) into staging buffers ahead of use
  degraded,         ///< paged layers are read by the kernels from mapped host memory over the link
                    ///< (the last rung of the out-of-memory ladder): no HBM copy
};

/// htp's settings and the machine as htp sees it; what plan_inputs does not already say.
struct htp_settings {
  placement where = placement::resident;
  strategy how = strategy::tensor_parallel;
  /// The pager's HBM budget per GPU in bytes (pager_config::hbm_budget_bytes), which holds the
  /// weights and the KV cache; 0: the device's exposed HBM (hbm_exposed_gb) less the headroom.
  double hbm_budget_bytes = 0;
  double hbm_exposed_gb = 0;       ///< what the device reports (cudaMemGetInfo); 0: hbm_gb
  double link_peak_gbps = 0;       ///< the calibrated copy peak the cap is a fraction of; 0: link
  double link_cap_fraction = 0.8;  ///< transfer_engine_config::default_cap_fraction; 1: uncapped
  double copy_latency_us = 5;      ///< fixed cost of one copy (one chunk)
  std::uint64_t chunk_bytes = 2ull << 20;        ///< transfer chunk (pager_config::chunk_bytes)
  std::uint64_t alloc_page_bytes = 64ull << 10;  ///< htp's page: every tensor rounded to it
  std::uint64_t slab_bytes = 64ull << 20;  ///< the slab (the resident window keeps four spare)
  bool embeddings = true;                  ///< false: the layers only (as the stream bench runs)
  bool paging_window = true;               ///< resident placement keeps a three-layer window free
  /// Paged tensors the pager prefetches ahead (pager_config::prefetch_lookahead); 0: two layers'
  /// worth (what the node bench sets).
  unsigned lookahead = 0;
  double interconnect_gbps = 450;     ///< per GPU, for collectives (NVLink 4: 450 GB/s)
  double collective_latency_us = 20;  ///< fixed cost of one collective call
  /// Paged weights stored compressed (pager::register_tensor with a weight_format): wire bytes /
  /// logical bytes. 1: uncompressed. 0.68 is the codec's bf16 ratio on Llama-like weights
  /// (docs/codec.md). The host tier shrinks by it; a page-in takes
  /// max(link time of the wire bytes, logical bytes / decode_gbps) plus one chunk's pipeline fill
  /// (docs/planner.md, "Compressed weights"). Not with strategy::degraded (nothing to map raw).
  double compression_ratio = 1;
  /// The device's decode rate in GB/s of decoded bytes. 250: sim_config::decode_bytes_per_second's
  /// default, the low end of DietGPU's published A100 rates (docs/codec.md); htp's kernel is not
  /// measured yet.
  double decode_gbps = 250;
};

/// htp's predicted behaviour, per GPU.
struct htp_prediction {
  bool feasible = true;
  std::string why_not;  ///< when not feasible: what does not fit, and by how much
  double hbm_budget_bytes = 0;
  int resident_layers = 0;
  int paged_layers = 0;
  std::uint64_t resident_bytes = 0;    ///< device-resident tensors, page-rounded (and embeddings)
  std::uint64_t kv_bytes = 0;          ///< the KV cache kept in HBM
  std::uint64_t paging_capacity = 0;   ///< HBM left for paged tensors
  std::uint64_t host_bytes = 0;        ///< host tier for the whole node: paged tensors only
  double paged_bytes_per_step = 0;     ///< Belady's rule over the paged tensors, steady state
  double wire_bytes_per_step = 0;      ///< of them, the bytes on the link (x compression_ratio)
  double link_gbps = 0;                ///< effective copy rate (chunk costs and the cap)
  double transfer_ms = 0;              ///< paged bytes at that rate
  double compute_ms = 0;               ///< every kernel of the step (roofline per tensor)
  double collective_ms_per_layer = 0;  ///< all-reduce (tensor parallel) or all-gather per layer
  double step_ms = 0;                  ///< the replayed timeline, mean over steady-state steps
  double tokens_per_second = 0;        ///< batch / step (decode)
  bool meets_budget = false;
};

/// Predicts what htp does with `in` under `s`. Never throws for a layout that does not fit:
/// feasible = false says why. Throws htp::invalid_argument for inputs out of range (as plan()).
htp_prediction predict_htp(const plan_inputs& in, const htp_settings& s);

const char* to_string(placement p) noexcept;
const char* to_string(strategy s) noexcept;

}  // namespace htp::bench
