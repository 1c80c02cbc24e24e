#include "cuda_kernels.hpp"

#include <htp/detail/mix.hpp>

namespace htp::cuda {
namespace {

constexpr int block_size = 256;

// Each thread sums the terms of a grid-strided set of words; a block reduces in shared memory and
// adds its partial sum atomically. The sum is order-independent, so the result equals the host's.
__global__ void checksum_kernel(const unsigned char* p, std::size_t bytes,
                                unsigned long long* result) {
  __shared__ unsigned long long partial[block_size];
  const std::size_t words = bytes / 8;
  unsigned long long sum = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(p) & 7u) == 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += stride) {
    std::uint64_t w = 0;
    if (aligned) {
      w = reinterpret_cast<const std::uint64_t*>(p)[i];
    } else {
      for (int b = 0; b < 8; ++b) w |= static_cast<std::uint64_t>(p[i * 8 + b]) << (8 * b);
    }
    sum += detail::checksum_term(w, i);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    sum += detail::mix64(bytes);
    const std::size_t tail = bytes % 8;
    if (tail != 0) {
      std::uint64_t w = 0;
      for (std::size_t b = 0; b < tail; ++b) w |= static_cast<std::uint64_t>(p[words * 8 + b]) << (8 * b);
      sum += detail::checksum_term(w, words);
    }
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = block_size / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(result, partial[0]);
}

__global__ void fill_kernel(unsigned char* p, std::size_t bytes, std::uint64_t seed) {
  const std::size_t words = (bytes + 7) / 8;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += stride) {
    const std::uint64_t w = detail::mix64(seed + i);
    const std::size_t n = bytes - i * 8 < 8 ? bytes - i * 8 : 8;
    for (std::size_t b = 0; b < n; ++b) p[i * 8 + b] = static_cast<unsigned char>(w >> (8 * b));
  }
}

unsigned grid_for(std::size_t words) {
  const std::size_t blocks = (words + block_size - 1) / block_size;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks));
}

}  // namespace

cudaError_t launch_checksum(const void* ptr, std::size_t bytes, std::uint64_t* result_host,
                            cudaStream_t s) {
  // Reduce into stream-ordered device scratch, then copy the 8 bytes out: atomics on mapped host
  // memory are not guaranteed over PCIe.
  void* scratch = nullptr;
  cudaError_t e = cudaMallocAsync(&scratch, sizeof(unsigned long long), s);
  if (e != cudaSuccess) return e;
  e = cudaMemsetAsync(scratch, 0, sizeof(unsigned long long), s);
  if (e == cudaSuccess) {
    checksum_kernel<<<grid_for(bytes / 8), block_size, 0, s>>>(
        static_cast<const unsigned char*>(ptr), bytes, static_cast<unsigned long long*>(scratch));
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(result_host, scratch, sizeof(std::uint64_t), cudaMemcpyDeviceToHost, s);
  }
  const cudaError_t f = cudaFreeAsync(scratch, s);
  return e != cudaSuccess ? e : f;
}

cudaError_t launch_fill_pattern(void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t s) {
  fill_kernel<<<grid_for((bytes + 7) / 8), block_size, 0, s>>>(static_cast<unsigned char*>(ptr),
                                                               bytes, seed);
  return cudaGetLastError();
}

}  // namespace htp::cuda
