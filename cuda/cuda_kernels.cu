#include "cuda_kernels.hpp"

#include <htp/detail/mix.hpp>

namespace htp::cuda {
namespace {

constexpr int block_size = 256;

// Each thread sums the terms of a grid-strided set of words; a block reduces in shared memory and
// adds its partial sum to the slot atomically. The sum is order-independent, so the result equals
// the host's. The last block to finish (counted in the slot) reads the total and zeroes the slot
// for the next use: true in its thread 0 only, with the total in *total.
__device__ bool reduce_checksum(const unsigned char* p, std::size_t bytes, checksum_slot* slot,
                                unsigned long long* total) {
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
      for (std::size_t b = 0; b < tail; ++b)
        w |= static_cast<std::uint64_t>(p[words * 8 + b]) << (8 * b);
      sum += detail::checksum_term(w, words);
    }
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = block_size / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x != 0) return false;
  atomicAdd(&slot->sum, partial[0]);
  __threadfence();  // this block's sum is visible before its count
  const unsigned int done = atomicAdd(&slot->blocks_done, 1u) + 1u;
  if (done != gridDim.x) return false;
  __threadfence();  // every other block's sum is visible to the reads below
  *total = atomicExch(&slot->sum, 0ull);
  atomicExch(&slot->blocks_done, 0u);
  return true;
}

// The last block writes the total to the pinned host word through its device address (a plain
// store: atomics on mapped memory are not guaranteed over PCIe).
__global__ void checksum_kernel(const unsigned char* p, std::size_t bytes, checksum_slot* slot,
                                unsigned long long* result) {
  unsigned long long total = 0;
  if (!reduce_checksum(p, bytes, slot, &total)) return;
  *reinterpret_cast<volatile unsigned long long*>(result) = total;
}

// The last block compares the total and counts in the two pinned host words: a plain
// read-modify-write (the only writer while verifies of one pair are ordered), then a system fence
// so the host sees both before the stream moves on.
__global__ void verify_checksum_kernel(const unsigned char* p, std::size_t bytes,
                                       checksum_slot* slot, unsigned long long expected,
                                       unsigned int* counters) {
  unsigned long long total = 0;
  if (!reduce_checksum(p, bytes, slot, &total)) return;
  volatile unsigned int* c = counters;
  c[0] = c[0] + 1u;
  if (total != expected) c[1] = c[1] + 1u;
  __threadfence_system();
}

// The pattern is word i = mix64(seed + i), little-endian, counted from `p` whatever its alignment.
// The body is the 8-aligned part: its word k starts `head` bytes into pattern word k, so it is the
// upper bytes of pattern word k followed by the lower bytes of pattern word k + 1.
__global__ void fill_kernel(unsigned char* p, std::size_t bytes, std::uint64_t seed) {
  const std::size_t misalign = reinterpret_cast<std::uintptr_t>(p) & 7u;
  const std::size_t head = misalign == 0 ? 0 : (8 - misalign < bytes ? 8 - misalign : bytes);
  const std::size_t body_words = (bytes - head) / 8;
  const unsigned int shift = static_cast<unsigned int>(8 * head);
  auto* body = reinterpret_cast<std::uint64_t*>(p + head);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
       k < body_words; k += stride) {
    const std::uint64_t lo = detail::mix64(seed + k);
    body[k] = shift == 0 ? lo : (lo >> shift) | (detail::mix64(seed + k + 1) << (64 - shift));
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    // Head bytes [0, head) and tail bytes [head + 8 * body_words, bytes): byte q is byte q % 8 of
    // pattern word q / 8.
    for (std::size_t q = 0; q < head; ++q) {
      p[q] = static_cast<unsigned char>(detail::mix64(seed) >> (8 * q));
    }
    for (std::size_t q = head + 8 * body_words; q < bytes; ++q) {
      p[q] = static_cast<unsigned char>(detail::mix64(seed + q / 8) >> (8 * (q % 8)));
    }
  }
}

unsigned grid_for(std::size_t words) {
  const std::size_t blocks = (words + block_size - 1) / block_size;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks));
}

}  // namespace

cudaError_t launch_checksum(const void* ptr, std::size_t bytes, checksum_slot* slot,
                            std::uint64_t* result_device, cudaStream_t s) {
  checksum_kernel<<<grid_for(bytes / 8), block_size, 0, s>>>(
      static_cast<const unsigned char*>(ptr), bytes, slot,
      reinterpret_cast<unsigned long long*>(result_device));
  return cudaGetLastError();
}

cudaError_t launch_verify_checksum(const void* ptr, std::size_t bytes, checksum_slot* slot,
                                   std::uint64_t expected, std::uint32_t* counters_device,
                                   cudaStream_t s) {
  verify_checksum_kernel<<<grid_for(bytes / 8), block_size, 0, s>>>(
      static_cast<const unsigned char*>(ptr), bytes, slot,
      static_cast<unsigned long long>(expected), counters_device);
  return cudaGetLastError();
}

cudaError_t launch_fill_pattern(void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t s) {
  fill_kernel<<<grid_for(bytes / 8), block_size, 0, s>>>(static_cast<unsigned char*>(ptr), bytes,
                                                         seed);
  return cudaGetLastError();
}

cudaError_t preload_kernels() {
  cudaFuncAttributes a{};
  cudaError_t e = cudaFuncGetAttributes(&a, checksum_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, verify_checksum_kernel);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, fill_kernel);
  return e;
}

}  // namespace htp::cuda
