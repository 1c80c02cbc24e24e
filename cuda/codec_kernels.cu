#include "codec_kernels.hpp"

#include <htp/detail/mix.hpp>

#include <htp/detail/codec_format.hpp>
#include "cuda_kernels.hpp"

namespace htp::cuda {
namespace {

constexpr int block_threads = 256;  // codec blocks per tile: one thread each
constexpr unsigned grid_blocks = 1024;
constexpr std::uint64_t verify_tile_bytes = 32 << 10;  // a verify block's share of a chunk

// Stores `s` at the pinned host word (its device address), if there is one: a plain store, as
// the checksum kernel's (atomics on mapped memory are not guaranteed over PCIe).
__device__ void report(std::uint32_t* status, codec::status s) {
  if (status != nullptr)
    *reinterpret_cast<volatile std::uint32_t*>(status) = static_cast<std::uint32_t>(s);
}

// The decode's report: only when the verify before it found nothing, so the status names the
// verify's check (a corrupt chunk's codes usually fail to decode too).
__device__ void report_decode(std::uint32_t* status, codec::status s) {
  if (status != nullptr && *reinterpret_cast<volatile std::uint32_t*>(status) == 0)
    report(status, s);
}

// What every thread of a CUDA block shares about the tile it works on.
struct tile_state {
  codec::frame_header h;
  codec::chunk_entry e;
  std::uint32_t first[codec::max_code_bits + 1];
  // One flag per decision, each written by thread 0 only where no thread can still be reading it.
  int header_ok;
  int entry_ok;
  int table_ok;
};

// Builds the chunk's decode table in shared memory: thread 0 checks the code lengths, then each
// thread fills the entries of its symbols (canonical code = first code of its length + rank).
__device__ bool build_table(const std::uint8_t* lengths, std::uint16_t* table, tile_state& t,
                            std::uint32_t* status) {
  for (unsigned i = threadIdx.x; i < codec::table_size; i += blockDim.x) table[i] = 0;
  if (threadIdx.x == 0) {
    const codec::status s = codec::first_codes(lengths, t.first);
    t.table_ok = s == codec::status::ok;
    if (!t.table_ok) report_decode(status, s);
  }
  __syncthreads();
  if (!t.table_ok) return false;
  for (unsigned s = threadIdx.x; s < 256; s += blockDim.x) {
    const unsigned l = codec::code_length(lengths, s);
    if (l != 0) codec::fill_entries(table, s, l, codec::canonical_code(lengths, t.first, s, l));
  }
  __syncthreads();
  return true;
}

// Thread `threadIdx.x` of tile `sub` decodes codec block sub * blockDim.x + threadIdx.x.
__device__ void decode_tile(const std::uint8_t* chunk, std::uint8_t* out,
                            const std::uint16_t* table, const tile_state& t, std::uint64_t decoded,
                            std::uint64_t sub, std::uint32_t* status) {
  const codec::frame_header& h = t.h;
  const std::uint64_t n = decoded / h.element_bytes;
  const std::uint64_t tail = decoded % h.element_bytes;
  const std::uint64_t blocks = codec::ceil_div(n, h.block_elements);
  const std::uint64_t prefix = codec::coded_prefix_bytes(h, n);
  const std::uint64_t bits_bytes = t.e.wire_bytes - prefix - tail;
  const std::uint8_t* ends = chunk + codec::lengths_bytes;
  const std::uint8_t* raw = ends + 4 * blocks;
  const std::uint8_t* bits = chunk + prefix;
  const std::uint64_t b = sub * blockDim.x + threadIdx.x;
  if (b < blocks) {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    codec::status s = codec::block_range(ends, blocks, b, bits_bytes, &begin, &end);
    if (s == codec::status::ok) {
      const std::uint64_t first = b * h.block_elements;
      const std::uint64_t count = n - first < h.block_elements ? n - first : h.block_elements;
      s = codec::decode_block(table, bits + begin, end - begin, raw + first * (h.element_bytes - 1),
                              out + first * h.element_bytes, count, h.element_bytes);
    }
    if (s != codec::status::ok) report_decode(status, s);
  }
  if (sub == 0 && threadIdx.x == 0) {
    for (std::uint64_t k = 0; k < tail; ++k) out[n * h.element_bytes + k] = bits[bits_bytes + k];
  }
}

// Copies slice `sub` of `tiles` of a raw chunk.
__device__ void copy_slice(const std::uint8_t* src, std::uint8_t* dst, std::uint64_t bytes,
                           std::uint64_t sub, std::uint64_t tiles) {
  const std::uint64_t per = codec::ceil_div(bytes, tiles);
  const std::uint64_t begin = sub * per;
  const std::uint64_t end = begin + per < bytes ? begin + per : bytes;
  for (std::uint64_t i = begin + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
}

__global__ void decode_kernel(const std::uint8_t* wire, std::uint64_t wire_bytes, std::uint8_t* dst,
                              std::uint64_t dst_bytes, std::uint32_t* status) {
  __shared__ std::uint16_t table[codec::table_size];
  __shared__ tile_state t;
  if (threadIdx.x == 0) {
    codec::status s = codec::parse_header(wire, wire_bytes, &t.h);
    if (s == codec::status::ok && t.h.decoded_bytes != dst_bytes)
      s = codec::status::wrong_decoded_size;
    t.header_ok = s == codec::status::ok;
    if (!t.header_ok && blockIdx.x == 0) report_decode(status, s);
  }
  __syncthreads();
  if (!t.header_ok) return;
  const std::uint64_t full_blocks =
      codec::ceil_div(t.h.chunk_bytes / t.h.element_bytes, t.h.block_elements);
  const std::uint64_t tiles = codec::ceil_div(full_blocks, blockDim.x);  // per chunk
  const std::uint64_t total = tiles * t.h.chunk_count;
  for (std::uint64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const std::uint64_t c = tile / tiles;
    const std::uint64_t sub = tile % tiles;
    __syncthreads();  // everyone is done with the previous tile's table and entry
    if (threadIdx.x == 0) {
      const codec::status s =
          codec::read_entry(wire, wire_bytes, t.h, static_cast<std::uint32_t>(c), &t.e);
      t.entry_ok = s == codec::status::ok;
      if (!t.entry_ok && sub == 0) report_decode(status, s);
    }
    __syncthreads();
    if (!t.entry_ok) continue;
    const std::uint8_t* chunk = wire + t.e.wire_offset;
    std::uint8_t* out = dst + c * t.h.chunk_bytes;
    const std::uint64_t decoded = codec::chunk_decoded_bytes(t.h, c);
    if (t.e.kind == codec::kind_raw) {
      copy_slice(chunk, out, decoded, sub, tiles);
      continue;
    }
    if (!build_table(chunk, table, t, status)) continue;
    decode_tile(chunk, out, table, t, decoded, sub, status);
  }
}

// Word i (8 bytes, little-endian, zero past `bytes`) of [p, p + bytes), as htp::checksum reads it.
__device__ std::uint64_t word_at(const std::uint8_t* p, std::uint64_t i, std::uint64_t bytes) {
  const std::uint64_t at = i * 8;
  if (at + 8 <= bytes && (reinterpret_cast<std::uintptr_t>(p + at) & 7u) == 0)
    return *reinterpret_cast<const std::uint64_t*>(p + at);
  std::uint64_t w = 0;
  for (std::uint64_t b = 0; b < 8 && at + b < bytes; ++b) w |= std::uint64_t{p[at + b]} << (8 * b);
  return w;
}

// The block's sum of every thread's `v`, returned to every thread. All threads must call it.
__device__ unsigned long long block_sum(unsigned long long v) {
  __shared__ unsigned long long partial[block_threads];
  __syncthreads();  // a previous call's readers are done with `partial`
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int s = block_threads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  return partial[0];
}

// Whether the frame's check word matches (format.hpp's header checks passed): block 0's threads
// sum the directory's checksum terms, every thread gets the answer.
__device__ bool header_check_ok(const std::uint8_t* w, const codec::frame_header& h) {
  const std::uint64_t dir_bytes = codec::entry_bytes * std::uint64_t{h.chunk_count};
  const std::uint8_t* dir = w + codec::header_bytes;
  unsigned long long sum = 0;
  for (std::uint64_t i = threadIdx.x; i < codec::ceil_div(dir_bytes, 8); i += blockDim.x)
    sum += detail::checksum_term(word_at(dir, i, dir_bytes), i);
  const std::uint64_t dir_sum = block_sum(sum) + detail::mix64(dir_bytes);
  std::uint64_t head = detail::mix64(28);
  for (std::uint64_t i = 0; i < 4; ++i) head += detail::checksum_term(word_at(w, i, 28), i);
  const std::uint64_t x = head ^ dir_sum * 3;
  return codec::load_u32(w + 28) == static_cast<std::uint32_t>(x ^ (x >> 32));
}

// This thread's weighted share of tile `sub` (of `tiles`) of chunk `c`: the checksum terms of its
// words, and for the chunk's first tile mix64(bytes) minus the directory's checksum, so that the
// chunk's shares sum to 0 exactly when its bytes match. A bad entry sets `bad` instead.
__device__ unsigned long long tile_share(const std::uint8_t* wire, std::uint64_t wire_bytes,
                                         const codec::frame_header& h, std::uint64_t c,
                                         std::uint64_t sub, std::uint64_t tiles, unsigned* bad) {
  codec::chunk_entry e{};
  const codec::status es =
      codec::read_entry(wire, wire_bytes, h, static_cast<std::uint32_t>(c), &e);
  if (es != codec::status::ok) {
    if (sub == 0 && threadIdx.x == 0) atomicCAS(bad, 0u, static_cast<unsigned>(es));
    return 0;
  }
  const std::uint8_t* p = wire + e.wire_offset;
  const std::uint64_t words = codec::ceil_div(e.wire_bytes, 8);
  const std::uint64_t per = verify_tile_bytes / 8;
  const std::uint64_t begin = sub * per;
  const std::uint64_t end = sub + 1 == tiles ? words : (begin + per < words ? begin + per : words);
  unsigned long long part = 0;
  for (std::uint64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    part += detail::checksum_term(word_at(p, i, e.wire_bytes), i);
  if (sub == 0 && threadIdx.x == 0) part += detail::mix64(e.wire_bytes) - e.checksum;
  return (detail::mix64(c) | 1u) * part;
}

__global__ void verify_kernel(const std::uint8_t* wire, std::uint64_t wire_bytes,
                              std::uint64_t dst_bytes, checksum_slot* slot, std::uint32_t* status) {
  __shared__ unsigned bad;  // the block's first failed check
  codec::frame_header h{};
  codec::status hs = codec::parse_header(wire, wire_bytes, &h);
  if (hs == codec::status::ok && h.decoded_bytes != dst_bytes)
    hs = codec::status::wrong_decoded_size;
  if (hs != codec::status::ok) {  // every block sees the same header: none touches the slot
    if (blockIdx.x == 0 && threadIdx.x == 0) report(status, hs);
    return;
  }
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  if (blockIdx.x == 0 && !header_check_ok(wire, h) && threadIdx.x == 0)
    atomicCAS(&bad, 0u, static_cast<unsigned>(codec::status::bad_header_checksum));
  const std::uint64_t tiles = codec::ceil_div(h.chunk_bytes, verify_tile_bytes);  // per chunk
  unsigned long long sum = 0;
  for (std::uint64_t tile = blockIdx.x; tile < tiles * h.chunk_count; tile += gridDim.x)
    sum += tile_share(wire, wire_bytes, h, tile / tiles, tile % tiles, tiles, &bad);
  const unsigned long long block_total = block_sum(sum);  // (its barriers publish `bad` too)
  if (threadIdx.x != 0) return;
  if (bad != 0) atomicCAS(&slot->status, 0u, bad);
  atomicAdd(&slot->sum, block_total);
  __threadfence();  // this block's sum and check are visible before its count
  const unsigned int done = atomicAdd(&slot->blocks_done, 1u) + 1u;
  if (done != gridDim.x) return;
  __threadfence();  // every other block's are visible to the reads below
  const unsigned long long total = atomicExch(&slot->sum, 0ull);
  unsigned code = atomicExch(&slot->status, 0u);
  atomicExch(&slot->blocks_done, 0u);
  if (code == 0 && total != 0) code = static_cast<unsigned>(codec::status::bad_chunk_checksum);
  report(status, static_cast<codec::status>(code));
}

}  // namespace

cudaError_t launch_decode_weights(const void* wire, std::size_t wire_bytes, void* dst,
                                  std::size_t dst_bytes, std::uint32_t* status_device,
                                  cudaStream_t s) {
  decode_kernel<<<grid_blocks, block_threads, 0, s>>>(static_cast<const std::uint8_t*>(wire),
                                                      wire_bytes, static_cast<std::uint8_t*>(dst),
                                                      dst_bytes, status_device);
  return cudaGetLastError();
}

cudaError_t launch_verify_frame(const void* wire, std::size_t wire_bytes, std::size_t dst_bytes,
                                checksum_slot* slot, std::uint32_t* status_device, cudaStream_t s) {
  const std::size_t tiles = wire_bytes / verify_tile_bytes + 1;
  const unsigned grid = static_cast<unsigned>(tiles < grid_blocks ? tiles : grid_blocks);
  verify_kernel<<<grid, block_threads, 0, s>>>(static_cast<const std::uint8_t*>(wire), wire_bytes,
                                               dst_bytes, slot, status_device);
  return cudaGetLastError();
}

cudaError_t preload_codec_kernels() {
  cudaFuncAttributes a{};
  const cudaError_t e = cudaFuncGetAttributes(&a, decode_kernel);
  return e == cudaSuccess ? cudaFuncGetAttributes(&a, verify_kernel) : e;
}

}  // namespace htp::cuda
