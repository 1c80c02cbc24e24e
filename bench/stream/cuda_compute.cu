// The cuda layer compute: one cuBLAS GEMM per weight matrix, Y[tokens, out] = X[tokens, in] · W,
// in bf16 or fp16 with fp32 accumulation, timed with CUDA events on the compute stream. After the
// timed work, the checksum kernel verifies the first and last sample_bytes of every weight it read
// (as the sim's default "modelled" compute does); dtypes without a GEMM path checksum every byte
// and verify the whole weight.
#include "compute.hpp"

#include <htp/detail/check.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace htp::bench {
namespace {

#define HTP_CUBLAS_TRY(call)                                                                  \
  do {                                                                                        \
    const cublasStatus_t s_ = (call);                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                          \
      throw ::htp::cuda_error(static_cast<int>(s_), cublasGetStatusName(s_), #call, __FILE__, \
                              __LINE__, cublasGetStatusString(s_));                           \
  } while (0)

/// Pinned words the checksum kernel writes, each with the value it must have. Harvested after the
/// compute stream has been synchronized.
class verifier {
 public:
  /// Checks that fit between two harvests (a step of 16 Llama layers queues ~220).
  static constexpr std::size_t capacity = 8192;

  explicit verifier(device& dev) : dev_(dev) {
    // One word per check, plus a sink for reads nobody verifies.
    words_ =
        static_cast<std::uint64_t*>(dev_.allocate(memory_kind::pinned_host, (capacity + 1) * 8));
    expected_.reserve(capacity);
  }
  ~verifier() { dev_.deallocate(memory_kind::pinned_host, words_, (capacity + 1) * 8); }
  verifier(const verifier&) = delete;
  verifier& operator=(const verifier&) = delete;

  /// Queues a checksum of [p, p + bytes) on `s` that must equal `expected`. Past capacity (no
  /// harvest for too long) the check is skipped, said once on stderr.
  void check(const void* p, std::size_t bytes, std::uint64_t expected, stream_ref s) {
    if (expected_.size() == capacity) {
      if (!warned_) {
        std::fprintf(stderr,
                     "htp-stream-bench: more than %zu weight checks between two steps; "
                     "the rest of this step is not verified\n",
                     capacity);
        warned_ = true;
      }
      return;
    }
    dev_.checksum_async(p, bytes, &words_[expected_.size()], s);
    expected_.push_back(expected);
  }

  /// Queues a checksum of [p, p + bytes) on `s` whose value nobody checks (data the run writes).
  void read(const void* p, std::size_t bytes, stream_ref s) {
    dev_.checksum_async(p, bytes, &words_[capacity], s);
  }

  /// Compares every queued check (the stream must have been synchronized) and forgets them.
  void harvest() {
    for (std::size_t i = 0; i < expected_.size(); ++i) {
      if (words_[i] != expected_[i]) ++mismatches_;
    }
    expected_.clear();
  }

  /// Mismatches since the last call, and resets.
  std::uint64_t take_mismatches() { return std::exchange(mismatches_, 0); }

 private:
  device& dev_;
  std::uint64_t* words_ = nullptr;
  std::vector<std::uint64_t> expected_;
  std::uint64_t mismatches_ = 0;
  bool warned_ = false;
};

class cuda_compute final : public layer_compute {
 public:
  cuda_compute(device& dev, dtype type, int max_tokens, std::uint64_t max_rows,
               std::uint64_t max_cols)
      : dev_(dev), type_(type), verify_(dev) {
    gemm_ = type == dtype::bf16 || type == dtype::fp16;
    HTP_CUBLAS_TRY(cublasCreate(&handle_));
    const std::size_t el = 2;
    // layer_tensor: rows = input features, cols = output features.
    x_bytes_ = static_cast<std::size_t>(max_tokens) * max_rows * el;
    y_bytes_ = static_cast<std::size_t>(max_tokens) * max_cols * el;
    x_ = dev_.allocate(memory_kind::device, x_bytes_);
    y_ = dev_.allocate(memory_kind::device, y_bytes_);
    stream init(dev_);
    dev_.fill_pattern_async(x_, x_bytes_, 12345, init);  // random activations, never zeros
    if (gemm_) warm_up(max_tokens, max_rows, max_cols, init);
    init.synchronize();
  }

  ~cuda_compute() override {
    for (auto& [a, b] : timings_) release_pair(a, b);
    for (auto& [a, b] : stalls_) release_pair(a, b);
    if (ref_event_ != nullptr) spare_events_.push_back(ref_event_);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    cublasDestroy(handle_);
    dev_.deallocate(memory_kind::device, x_, x_bytes_);
    dev_.deallocate(memory_kind::device, y_, y_bytes_);
  }

  void run_layer(const std::vector<weight_view>& weights, int tokens, stream_ref s) override {
    auto cs = static_cast<cudaStream_t>(s.native);
    if (ref_event_ == nullptr) {  // the host time the stream reaches this point anchors the spans
      ref_event_ = take_event();
      HTP_CUDA_TRY(cudaEventRecord(ref_event_, cs));
      HTP_CUDA_TRY(cudaLaunchHostFunc(cs, &cuda_compute::stamp, &ref_host_ns_));
    }
    cudaEvent_t start = take_event(), stop = take_event();
    HTP_CUDA_TRY(cudaEventRecord(start, cs));
    HTP_CUBLAS_TRY(cublasSetStream(handle_, cs));
    for (const auto& w : weights) {
      if (gemm_ && w.rows > 1) {
        gemm(w.span.data, w.cols, tokens, w.rows);
      } else {  // vectors, and dtypes without a GEMM here: read every byte, verify the whole
        if (w.verify) {
          verify_.check(w.span.data, w.span.bytes, w.expected_checksum, s);
        } else {
          verify_.read(w.span.data, w.span.bytes, s);
        }
      }
    }
    HTP_CUDA_TRY(cudaEventRecord(stop, cs));
    timings_.emplace_back(start, stop);
    // Verification after the timed work (it still occupies the stream, ~2 small kernels a weight).
    for (const auto& w : weights) {
      if (!w.verify || !(gemm_ && w.rows > 1)) continue;
      const std::size_t n = std::min(sample_bytes, w.span.bytes);
      const auto* p = static_cast<const unsigned char*>(w.span.data);
      verify_.check(p, n, w.expected_head, s);
      if (n < w.span.bytes) verify_.check(p + w.span.bytes - n, n, w.expected_tail, s);
    }
  }

  void begin_stall(stream_ref s) override {
    stall_begin_ = take_event();
    HTP_CUDA_TRY(cudaEventRecord(stall_begin_, static_cast<cudaStream_t>(s.native)));
  }
  void end_stall(stream_ref s) override {
    cudaEvent_t end = take_event();
    HTP_CUDA_TRY(cudaEventRecord(end, static_cast<cudaStream_t>(s.native)));
    stalls_.emplace_back(stall_begin_, end);
  }
  std::vector<double> stall_samples_ms() const override {
    std::vector<double> out;
    for (const auto& [a, b] : stalls_) {
      float ms = 0;
      HTP_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
      out.push_back(ms);
    }
    return out;
  }

  double take_stall_ms() override { return take_elapsed(stalls_); }

  std::vector<span> take_spans() override {
    std::vector<span> out;
    if (ref_event_ == nullptr) return out;
    const auto origin =
        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ref_host_ns_.load()));
    const auto at = [&](cudaEvent_t e) {
      float ms = 0;
      HTP_CUDA_TRY(cudaEventElapsedTime(&ms, ref_event_, e));
      return origin +
             std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(ms) * 1e6));
    };
    for (const auto& [a, b] : timings_) out.push_back({at(a), at(b)});
    spare_events_.push_back(ref_event_);
    ref_event_ = nullptr;
    return out;
  }

  double take_compute_ms() override {
    verify_.harvest();  // the stream has been synchronized (the contract of this call)
    return take_elapsed(timings_);
  }

  std::uint64_t take_mismatches() override {
    verify_.harvest();
    return verify_.take_mismatches();
  }

  std::string description() const override {
    if (gemm_) {
      return std::string("cuda: cuBLAS GEMM per weight matrix, ") + to_string(type_) +
             " with fp32 accumulation, Y = X * W; first and last 4 KiB of each weight verified by "
             "the checksum kernel after the timed GEMMs";
    }
    return std::string("cuda: ") + to_string(type_) +
           " has no GEMM path here; a kernel reads and verifies every weight byte (checksum)";
  }

 private:
  void gemm(const void* w, std::uint64_t out, int tokens, std::uint64_t in) {
    // W is [in, out] row-major, i.e. column-major out x in (ld = out):
    // Y (out x tokens, column-major) = W · X, X column-major in x tokens (ld = in).
    const cudaDataType_t t = type_ == dtype::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float alpha = 1.0f, beta = 0.0f;
    HTP_CUBLAS_TRY(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(out), tokens,
                                static_cast<int>(in), &alpha, w, t, static_cast<int>(out), x_, t,
                                static_cast<int>(in), &beta, y_, t, static_cast<int>(out),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // Runs the GEMM shapes a layer can have at the largest sizes once, now, so that cuBLAS loads
  // its kernels (lazily, CUDA 12.2+) here rather than at the first layer, when the compute stream
  // is already parked on a copy's value word. cuBLAS may pick other kernels for smaller matrices;
  // gpu-check.sh also runs the bench with CUDA_MODULE_LOADING=EAGER for that reason.
  void warm_up(int tokens, std::uint64_t max_rows, std::uint64_t max_cols, stream_ref s) {
    const std::size_t w_bytes = static_cast<std::size_t>(max_rows * max_cols * 2);
    void* w = dev_.allocate(memory_kind::device, w_bytes);
    dev_.fill_pattern_async(w, w_bytes, 777, s);
    HTP_CUBLAS_TRY(cublasSetStream(handle_, static_cast<cudaStream_t>(s.native)));
    const std::uint64_t small = std::min(max_rows, max_cols);
    for (std::uint64_t out : {max_cols, small}) {
      for (std::uint64_t in : {max_rows, small}) gemm(w, out, tokens, in);
    }
    dev_.synchronize(s);
    dev_.deallocate(memory_kind::device, w, w_bytes);
  }

  /// Sum of the (start, stop) pairs' elapsed times in ms; recycles the events and clears `pairs`.
  double take_elapsed(std::vector<std::pair<cudaEvent_t, cudaEvent_t>>& pairs) {
    double total = 0;
    for (auto& [a, b] : pairs) {
      float ms = 0;
      HTP_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
      total += ms;
      release_pair(a, b);
    }
    pairs.clear();
    return total;
  }

  cudaEvent_t take_event() {
    if (!spare_events_.empty()) {
      cudaEvent_t e = spare_events_.back();
      spare_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    HTP_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDefault));  // timing: elapsed time is read
    return e;
  }

  void release_pair(cudaEvent_t a, cudaEvent_t b) {
    spare_events_.push_back(a);
    spare_events_.push_back(b);
  }

  device& dev_;
  dtype type_;
  bool gemm_ = false;
  cublasHandle_t handle_ = nullptr;
  void* x_ = nullptr;
  void* y_ = nullptr;
  std::size_t x_bytes_ = 0, y_bytes_ = 0;
  verifier verify_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timings_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> stalls_;  // around each layer's acquires
  // Device-to-host time anchor of the spans: an event and the steady-clock time a host function
  // saw the stream reach it (CUDA runs host functions in stream order, on its own thread).
  static void CUDART_CB stamp(void* ns) {
    static_cast<std::atomic<std::int64_t>*>(ns)->store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }
  cudaEvent_t ref_event_ = nullptr;
  std::atomic<std::int64_t> ref_host_ns_{0};
  cudaEvent_t stall_begin_ = nullptr;
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace

std::unique_ptr<layer_compute> make_cuda_compute(device& dev, dtype type, int max_tokens,
                                                 std::uint64_t max_rows, std::uint64_t max_cols) {
  HTP_EXPECTS(dev.properties().kind == backend::cuda, invalid_argument,
              "the cuda compute needs the cuda backend");
  return std::make_unique<cuda_compute>(dev, type, max_tokens, max_rows, max_cols);
}

}  // namespace htp::bench
