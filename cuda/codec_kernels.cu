#include "codec_kernels.hpp"

#include "codec/format.hpp"

namespace htp::cuda {
namespace {

constexpr int block_threads = 256;  // codec blocks per tile: one thread each
constexpr unsigned grid_blocks = 1024;

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
__device__ bool build_table(const std::uint8_t* lengths, std::uint16_t* table, tile_state& t) {
  for (unsigned i = threadIdx.x; i < codec::table_size; i += blockDim.x) table[i] = 0;
  if (threadIdx.x == 0) t.table_ok = codec::first_codes(lengths, t.first) == codec::status::ok;
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
                            std::uint64_t sub) {
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
    if (codec::block_range(ends, blocks, b, bits_bytes, &begin, &end) == codec::status::ok) {
      const std::uint64_t first = b * h.block_elements;
      const std::uint64_t count = n - first < h.block_elements ? n - first : h.block_elements;
      codec::decode_block(table, bits + begin, end - begin, raw + first * (h.element_bytes - 1),
                          out + first * h.element_bytes, count, h.element_bytes);
    }
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
                              std::uint64_t dst_bytes) {
  __shared__ std::uint16_t table[codec::table_size];
  __shared__ tile_state t;
  if (threadIdx.x == 0) {
    t.header_ok = codec::parse_header(wire, wire_bytes, &t.h) == codec::status::ok &&
                  t.h.decoded_bytes == dst_bytes;
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
      t.entry_ok = codec::read_entry(wire, wire_bytes, t.h, static_cast<std::uint32_t>(c), &t.e) ==
                   codec::status::ok;
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
    if (!build_table(chunk, table, t)) continue;
    decode_tile(chunk, out, table, t, decoded, sub);
  }
}

}  // namespace

cudaError_t launch_decode_weights(const void* wire, std::size_t wire_bytes, void* dst,
                                  std::size_t dst_bytes, cudaStream_t s) {
  decode_kernel<<<grid_blocks, block_threads, 0, s>>>(static_cast<const std::uint8_t*>(wire),
                                                      wire_bytes, static_cast<std::uint8_t*>(dst),
                                                      dst_bytes);
  return cudaGetLastError();
}

cudaError_t preload_codec_kernels() {
  cudaFuncAttributes a{};
  return cudaFuncGetAttributes(&a, decode_kernel);
}

}  // namespace htp::cuda
