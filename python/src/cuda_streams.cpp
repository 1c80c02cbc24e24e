// The legacy default stream bridge (streams.hpp), on the CUDA runtime. Compiled in cuda builds
// only.
#include "streams.hpp"

#include <htp/error.hpp>

#include <cuda_runtime.h>

#include <mutex>

namespace htp::python {
namespace {

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw htp::cuda_error(static_cast<int>(rc), cudaGetErrorName(rc), what, __FILE__, __LINE__,
                          cudaGetErrorString(rc));
  }
}

class cuda_legacy_bridge final : public legacy_bridge {
 public:
  cuda_legacy_bridge() {
    check(cudaEventCreateWithFlags(&own_done_, cudaEventDisableTiming), "cudaEventCreate");
    const cudaError_t rc = cudaEventCreateWithFlags(&legacy_done_, cudaEventDisableTiming);
    if (rc != cudaSuccess) cudaEventDestroy(own_done_);
    check(rc, "cudaEventCreate");
  }
  ~cuda_legacy_bridge() override {
    cudaEventDestroy(own_done_);
    cudaEventDestroy(legacy_done_);
  }
  void legacy_waits_for(stream_ref own) override {
    std::lock_guard<std::mutex> lock(mutex_);  // one record-then-wait at a time per event
    check(cudaEventRecord(own_done_, static_cast<cudaStream_t>(own.native)), "cudaEventRecord");
    check(cudaStreamWaitEvent(cudaStreamLegacy, own_done_, 0), "cudaStreamWaitEvent");
  }
  void waits_for_legacy(stream_ref own) override {
    std::lock_guard<std::mutex> lock(mutex_);
    check(cudaEventRecord(legacy_done_, cudaStreamLegacy), "cudaEventRecord");
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(own.native), legacy_done_, 0),
          "cudaStreamWaitEvent");
  }

 private:
  std::mutex mutex_;
  cudaEvent_t own_done_ = nullptr;
  cudaEvent_t legacy_done_ = nullptr;
};

}  // namespace

std::unique_ptr<legacy_bridge> make_legacy_bridge() {
  return std::make_unique<cuda_legacy_bridge>();
}

}  // namespace htp::python
