// The "model" a streaming benchmark runs over paged weights: per layer, something that reads every
// weight byte on the compute stream. On a GPU, real cuBLAS GEMMs (Y = X · W for each matrix, with
// `tokens` rows of X); on sim, a host function that checksums every weight byte (real memory
// traffic on the CPU) or sleeps for a modelled duration.
#pragma once

#include <htp/checksum.hpp>
#include <htp/device.hpp>
#include <htp/pager.hpp>

#include "shared/model_shapes.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace htp::bench {

/// One weight matrix of a layer as the compute sees it: where it is and its shape.
struct weight_view {
  device_span span;
  std::uint64_t rows = 0;  ///< input features (1 for vectors and KV blocks: read, not multiplied)
  std::uint64_t cols = 0;  ///< output features
  std::uint64_t expected_checksum = 0;  ///< htp::checksum of its bytes (verification on sim)
  std::uint64_t expected_head = 0;      ///< checksum of its first sample_bytes (modelled mode)
  std::uint64_t expected_tail = 0;      ///< checksum of its last sample_bytes (modelled mode)
  bool verify = true;                   ///< false for data the run writes (KV blocks): read only
};

/// Bytes at each end of a weight that the modelled sim compute verifies.
inline constexpr std::size_t sample_bytes = 4096;

/// The checksums a weight_view carries: of all `bytes`, and of the first and last sample_bytes.
struct weight_sums {
  std::uint64_t sum = 0, head = 0, tail = 0;
};
inline weight_sums sums_of(const unsigned char* data, std::size_t bytes) {
  const std::size_t n = std::min(sample_bytes, bytes);
  return {checksum(data, bytes), checksum(data, n), checksum(data + bytes - n, n)};
}

class layer_compute {
 public:
  virtual ~layer_compute() = default;
  /// Queues the work that reads `weights` on `s` (a layer, or one weight of it). Returns at once.
  virtual void run_layer(const std::vector<weight_view>& weights, int tokens, stream_ref s) = 0;
  /// Device time spent in run_layer work since the last call (ms), and resets. Call only after
  /// the stream has been synchronized.
  virtual double take_compute_ms() = 0;
  /// Marks on `s` where a stretch of htp's waits begins / ends (around a layer's acquires: only the
  /// waits acquire enqueued run between the marks), so the time the stream spent between them is
  /// the compute stream's stall on htp. Measured on the device: CUDA timing events on cuda, host
  /// functions stamped by the stream's own thread on sim. Return at once.
  virtual void begin_stall(stream_ref s) = 0;
  virtual void end_stall(stream_ref s) = 0;
  /// Stall time (ms) between the marks since the last call, and resets. Synchronize first.
  virtual double take_stall_ms() = 0;
  /// Each stall (ms) between a pair of marks since the last take_stall_ms(), in order; read it
  /// before take_stall_ms(), which clears it. Synchronize first.
  virtual std::vector<double> stall_samples_ms() const = 0;
  /// A span of run_layer work on the device, in host steady-clock time.
  struct span {
    std::chrono::steady_clock::time_point begin, end;
  };
  /// The device spans of run_layer work since the last call, and resets. Synchronize first.
  virtual std::vector<span> take_spans() = 0;
  /// Weights whose bytes did not match (sim checksum mode only; 0 elsewhere). Synchronize first.
  virtual std::uint64_t take_mismatches() = 0;
  /// One line saying what the compute is, for the report.
  virtual std::string description() const = 0;
};

/// sim: `mode` "checksum" (read and verify every byte on the host) or "modelled" (take
/// bytes / modelled_gbps of device time, as a GPU reading the weights from HBM would, and verify
/// the first and last sample_bytes of each weight). A weight served degraded (from mapped host
/// memory) is read at `link_gbps` instead, as a kernel reading it over the link would; 0: as HBM.
std::unique_ptr<layer_compute> make_sim_compute(device& dev, const std::string& mode,
                                                double modelled_gbps, double link_gbps = 0);

/// cuda: cuBLAS GEMMs in `type` (bf16 or fp16; fp8/int8 fall back to a kernel reading every byte,
/// said in description()). @throws htp::invalid_argument when htp was built without CUDA.
std::unique_ptr<layer_compute> make_cuda_compute(device& dev, dtype type, int max_tokens,
                                                 std::uint64_t max_rows, std::uint64_t max_cols);
/// make_cuda_compute sized for the largest matrix of `model`'s layers.
inline std::unique_ptr<layer_compute> make_cuda_compute(device& dev, dtype type, int max_tokens,
                                                        const model_shape& model) {
  std::uint64_t rows = 1, cols = 1;
  for (const auto& t : layer_tensors(model)) {
    rows = std::max(rows, t.rows);
    cols = std::max(cols, t.cols);
  }
  return make_cuda_compute(dev, type, max_tokens, rows, cols);
}

}  // namespace htp::bench
