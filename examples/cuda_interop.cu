// An engine's own CUDA code next to htp: the engine owns its stream and its kernel; htp pages the
// weights. Between pager.acquire and pager.release the engine launches its kernel on its own
// stream (wrapped with htp::wrap_stream), then checks the result on the host. The engine's
// current device is the same after every htp call. Exits 77 (ctest: skipped) without a GPU.
#include <htp/checksum.hpp>
#include <htp/cuda_interop.hpp>
#include <htp/pager.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

/// The engine's "layer": sums the weight bytes (one atomic per block).
__global__ void sum_bytes(const unsigned char* w, std::size_t n, unsigned long long* out) {
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    local += w[i];
  atomicAdd(out, local);
}

bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--help") == 0) {
    std::puts("htp-example-cuda-interop: pages 4 layers through a pager on the program's own CUDA "
              "stream and checks its kernel's sums; exits 77 without a GPU");
    return 0;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::puts("cuda_interop: no GPU here; skipped");
    return 77;
  }
  // The engine initialised its GPU and created its stream before htp existed.
  if (!ok(cudaSetDevice(0), "cudaSetDevice")) return 1;
  cudaStream_t engine_stream = nullptr;
  if (!ok(cudaStreamCreateWithFlags(&engine_stream, cudaStreamNonBlocking), "cudaStreamCreate"))
    return 1;
  unsigned long long* d_sum = nullptr;
  if (!ok(cudaMalloc(&d_sum, sizeof *d_sum), "cudaMalloc")) return 1;
  // The result lands in pinned memory: a copy into pageable memory would be synchronous, on a
  // stream that htp may have parked on a value word.
  unsigned long long* h_sum = nullptr;
  if (!ok(cudaMallocHost(&h_sum, sizeof *h_sum), "cudaMallocHost")) return 1;
  // Load the engine's kernel now, before any stream of this program waits for htp: a lazy module
  // load (CUDA_MODULE_LOADING=LAZY, the default) may wait for the whole context, and a stream
  // parked on a copy's value word would then never let it finish. The rule: allocate, load and
  // pin at set-up (docs/gpu.md, "Parked streams").
  cudaFuncAttributes attr{};
  if (!ok(cudaFuncGetAttributes(&attr, sum_bytes), "cudaFuncGetAttributes")) return 1;

  int bad = 0;
  {
    auto dev = htp::make_cuda_device(0);
    htp::pager_config cfg;
    cfg.hbm_budget_bytes = 16 << 20;
    cfg.host_budget_bytes = 64 << 20;
    cfg.slab_bytes = 2 << 20;
    htp::pager pager(*dev, cfg);
    const htp::stream_ref compute = htp::wrap_stream(engine_stream);

    const std::size_t bytes = 6 << 20;
    std::vector<unsigned char> w(bytes);
    std::vector<htp::tensor_handle> layers;
    std::vector<unsigned long long> expected;
    for (int i = 0; i < 4; ++i) {
      htp::fill_pattern(w.data(), bytes, static_cast<std::uint64_t>(i));
      unsigned long long s = 0;
      for (unsigned char b : w) s += b;
      expected.push_back(s);
      layers.push_back(pager.register_tensor("layer" + std::to_string(i), bytes,
                                             htp::tensor_kind::weight, w.data()));
    }
    pager.set_schedule(layers, /*cyclic=*/true);

    for (int step = 0; step < 2; ++step) {
      for (std::size_t i = 0; i < layers.size(); ++i) {
        const htp::device_span s =
            pager.acquire(layers[i], compute);  // engine_stream waits on the GPU
        cudaMemsetAsync(d_sum, 0, sizeof *d_sum, engine_stream);
        sum_bytes<<<64, 256, 0, htp::native_stream(compute)>>>(
            static_cast<const unsigned char*>(s.data), s.bytes, d_sum);
        pager.release(layers[i], compute);  // the memory is reused only after the kernel
        cudaMemcpyAsync(h_sum, d_sum, sizeof *h_sum, cudaMemcpyDeviceToHost, engine_stream);
        if (!ok(cudaStreamSynchronize(engine_stream), "kernel")) return 1;
        bad += *h_sum != expected[i];
      }
    }
    int current = -1;
    cudaGetDevice(&current);
    if (current != 0) {
      std::fprintf(stderr, "cuda_interop: htp changed the current device to %d\n", current);
      ++bad;
    }
    const auto m = pager.metrics();
    std::printf("cuda_interop: %llu acquires, %llu faults on the engine's stream; sums %s\n",
                static_cast<unsigned long long>(m.acquires),
                static_cast<unsigned long long>(m.faults), bad == 0 ? "match" : "DIFFER");
  }
  cudaFreeHost(h_sum);  // after the pager is gone: no htp stream is parked any more
  cudaFree(d_sum);
  cudaStreamDestroy(engine_stream);
  return bad == 0 ? 0 : 1;
}
