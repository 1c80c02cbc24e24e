// The cuda layer compute: one cuBLAS GEMM per weight matrix, Y[tokens, out] = X[tokens, in] · W,
// in bf16 or fp16 with fp32 accumulation, timed with CUDA events on the compute stream.
#include "compute.hpp"

#include <htp/detail/check.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <utility>
#include <vector>

namespace htp::bench {
namespace {

#define HTP_CUBLAS_TRY(call)                                                                   \
  do {                                                                                         \
    const cublasStatus_t s_ = (call);                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
      throw ::htp::cuda_error(static_cast<int>(s_), cublasGetStatusName(s_), #call, __FILE__, \
                              __LINE__, cublasGetStatusString(s_));                           \
  } while (0)

class cuda_compute final : public layer_compute {
 public:
  cuda_compute(device& dev, dtype type, int max_tokens, std::uint64_t max_rows, std::uint64_t max_cols)
      : dev_(dev), type_(type) {
    gemm_ = type == dtype::bf16 || type == dtype::fp16;
    HTP_CUBLAS_TRY(cublasCreate(&handle_));
    const std::size_t el = 2;
    // layer_tensor: rows = input features, cols = output features.
    x_bytes_ = static_cast<std::size_t>(max_tokens) * max_rows * el;
    y_bytes_ = static_cast<std::size_t>(max_tokens) * max_cols * el;
    x_ = dev_.allocate(memory_kind::device, x_bytes_);
    y_ = dev_.allocate(memory_kind::device, y_bytes_);
    sums_ = static_cast<std::uint64_t*>(dev_.allocate(memory_kind::pinned_host, 8 * 64));
    stream init(dev_);
    dev_.fill_pattern_async(x_, x_bytes_, 12345, init);  // random activations, never zeros
    init.synchronize();
  }

  ~cuda_compute() override {
    for (auto& [a, b] : timings_) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
    cublasDestroy(handle_);
    dev_.deallocate(memory_kind::device, x_, x_bytes_);
    dev_.deallocate(memory_kind::device, y_, y_bytes_);
    dev_.deallocate(memory_kind::pinned_host, sums_, 8 * 64);
  }

  void run_layer(const std::vector<weight_view>& weights, int tokens, stream_ref s) override {
    auto cs = static_cast<cudaStream_t>(s.native);
    cudaEvent_t start = nullptr, stop = nullptr;
    HTP_CUDA_TRY(cudaEventCreate(&start));
    HTP_CUDA_TRY(cudaEventCreate(&stop));
    HTP_CUDA_TRY(cudaEventRecord(start, cs));
    HTP_CUBLAS_TRY(cublasSetStream(handle_, cs));
    const cudaDataType_t t = type_ == dtype::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float alpha = 1.0f, beta = 0.0f;
    std::size_t k = 0;
    for (const auto& w : weights) {
      if (gemm_ && w.rows > 1) {
        // W is [in = rows, out = cols] row-major, i.e. column-major out x in (ld = out):
        // Y (out x tokens, column-major) = W · X, X column-major in x tokens (ld = in).
        HTP_CUBLAS_TRY(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(w.cols), tokens,
                                    static_cast<int>(w.rows), &alpha, w.span.data, t,
                                    static_cast<int>(w.cols), x_, t, static_cast<int>(w.rows), &beta,
                                    y_, t, static_cast<int>(w.cols), CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
      } else {  // vectors, and dtypes without a GEMM here: read every byte
        dev_.checksum_async(w.span.data, w.span.bytes, &sums_[k++ % 64], s);
      }
    }
    HTP_CUDA_TRY(cudaEventRecord(stop, cs));
    timings_.emplace_back(start, stop);
  }

  double take_compute_ms() override {
    double total = 0;
    for (auto& [a, b] : timings_) {
      float ms = 0;
      HTP_CUDA_TRY(cudaEventElapsedTime(&ms, a, b));
      total += ms;
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
    timings_.clear();
    return total;
  }

  std::uint64_t take_mismatches() override { return 0; }

  std::string description() const override {
    if (gemm_) {
      return std::string("cuda: cuBLAS GEMM per weight matrix, ") + to_string(type_) +
             " with fp32 accumulation, Y = X * W";
    }
    return std::string("cuda: ") + to_string(type_) +
           " has no GEMM path here; a kernel reads every weight byte (checksum)";
  }

 private:
  device& dev_;
  dtype type_;
  bool gemm_ = false;
  cublasHandle_t handle_ = nullptr;
  void* x_ = nullptr;
  void* y_ = nullptr;
  std::size_t x_bytes_ = 0, y_bytes_ = 0;
  std::uint64_t* sums_ = nullptr;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timings_;
};

}  // namespace

std::unique_ptr<layer_compute> make_cuda_compute(device& dev, dtype type, int max_tokens,
                                                 std::uint64_t max_rows, std::uint64_t max_cols) {
  HTP_EXPECTS(dev.properties().kind == backend::cuda, invalid_argument,
              "the cuda compute needs the cuda backend");
  return std::make_unique<cuda_compute>(dev, type, max_tokens, max_rows, max_cols);
}

}  // namespace htp::bench
