// Internal (not part of the API): the codec's wire format and its decoding steps, shared by the
// CPU reference decoder (src/codec/decode.cpp), the CUDA kernel (cuda/codec_kernels.cu), the sim
// backend and the transfer engine (status words), so all read the same bytes the same way. Plain
// C++ that nvcc also compiles for the device: no exceptions, no allocation, no standard library
// beyond fixed-width integers; each step returns a status. docs/codec.md describes the layout.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define HTP_CODEC_HD __host__ __device__ inline
#else
#define HTP_CODEC_HD inline
#endif

namespace htp::codec {

inline constexpr std::uint32_t magic = 0x57505448;  // "HTPW", little-endian
inline constexpr std::uint8_t version = 1;
inline constexpr std::size_t header_bytes = 32;
inline constexpr std::size_t entry_bytes = 24;     // one chunk directory entry
inline constexpr std::size_t lengths_bytes = 128;  // 256 code lengths, 4 bits each
inline constexpr unsigned max_code_bits = 12;      // longest code; the decode table's index width
inline constexpr std::size_t table_size = std::size_t{1} << max_code_bits;
inline constexpr std::size_t min_chunk_bytes = 4096;
inline constexpr std::size_t max_chunk_bytes = std::size_t{1} << 30;
inline constexpr std::size_t min_block_elements = 64;
inline constexpr std::size_t max_block_elements = 65536;
inline constexpr std::uint32_t kind_coded = 0;
inline constexpr std::uint32_t kind_raw = 1;

/// What a decoding step found. Every value but ok is a corrupt stream (describe() words it).
enum class status : int {
  ok = 0,
  truncated_header,
  bad_magic,
  bad_version,
  bad_format,
  bad_reserved,
  bad_chunk_size,
  bad_block_size,
  bad_chunk_count,
  bad_chunk_offset,
  bad_chunk_kind,
  bad_chunk_length,
  bad_chunk_checksum,
  bad_header_checksum,
  bad_code_length,
  oversubscribed_code,
  bad_block_offset,
  bad_code,
  bits_overrun,
  trailing_bytes,
  wrong_decoded_size,  // the frame decodes to another size than the destination's
};

#ifndef __CUDA_ARCH__
/// One sentence saying which check `s` is (src/codec/decode.cpp). Host only.
const char* describe(status s) noexcept;

/// The checks of a verified decode (device::decode_weights_async with a status word), on the
/// host: the header, its check word, every directory entry and every chunk's checksum, and that
/// the frame decodes to `dst_bytes`. Returns the first failed check, or ok. Reads only
/// [wire, wire + wire_bytes). Host only (the cuda backend runs the same checks as a kernel).
status check_frame(const std::uint8_t* wire, std::uint64_t wire_bytes,
                   std::uint64_t dst_bytes) noexcept;
#endif

/// The frame header's fields (after the magic and version checks).
struct frame_header {
  std::uint64_t decoded_bytes;
  std::uint32_t chunk_bytes;
  std::uint32_t block_elements;
  std::uint32_t chunk_count;
  std::uint32_t element_bytes;  // 2 or 4, from the format byte
  std::uint8_t format;
};

/// One chunk directory entry.
struct chunk_entry {
  std::uint64_t wire_offset;
  std::uint32_t wire_bytes;
  std::uint32_t kind;
  std::uint64_t checksum;  // htp::checksum of the chunk's wire bytes (the CPU decoder checks it)
};

HTP_CODEC_HD std::uint32_t load_u32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

HTP_CODEC_HD std::uint64_t load_u64(const std::uint8_t* p) {
  return std::uint64_t{load_u32(p)} | std::uint64_t{load_u32(p + 4)} << 32;
}

HTP_CODEC_HD std::uint32_t element_bytes_of(std::uint8_t format) {
  return format == 1 || format == 2 ? 2u : format == 3 ? 4u : 0u;
}

/// Elements per decoded chunk of `bytes` (the remainder, bytes % element size, is a raw tail).
HTP_CODEC_HD std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

/// Parses the 32-byte header of a frame of `wire_bytes` bytes, checking that the directory fits.
HTP_CODEC_HD status parse_header(const std::uint8_t* w, std::uint64_t wire_bytes, frame_header* h) {
  if (wire_bytes < header_bytes) return status::truncated_header;
  if (load_u32(w) != magic) return status::bad_magic;
  if (w[4] != version) return status::bad_version;
  h->format = w[5];
  h->element_bytes = element_bytes_of(w[5]);
  if (h->element_bytes == 0) return status::bad_format;
  if (w[6] != 0 || w[7] != 0) return status::bad_reserved;
  h->decoded_bytes = load_u64(w + 8);
  h->chunk_bytes = load_u32(w + 16);
  h->block_elements = load_u32(w + 20);
  h->chunk_count = load_u32(w + 24);
  if (h->chunk_bytes % 4 != 0 || h->chunk_bytes < min_chunk_bytes ||
      h->chunk_bytes > max_chunk_bytes) {
    return status::bad_chunk_size;
  }
  if (h->block_elements < min_block_elements || h->block_elements > max_block_elements) {
    return status::bad_block_size;
  }
  if (h->chunk_count > (wire_bytes - header_bytes) / entry_bytes) return status::bad_chunk_count;
  if (h->decoded_bytes > std::uint64_t{h->chunk_count} * h->chunk_bytes ||
      ceil_div(h->decoded_bytes, h->chunk_bytes) != h->chunk_count) {
    return status::bad_chunk_count;
  }
  return status::ok;
}

/// Decoded bytes of chunk `i` of the frame.
HTP_CODEC_HD std::uint64_t chunk_decoded_bytes(const frame_header& h, std::uint64_t i) {
  const std::uint64_t begin = i * h.chunk_bytes;
  const std::uint64_t left = h.decoded_bytes - begin;
  return left < h.chunk_bytes ? left : h.chunk_bytes;
}

/// Bytes before the bitstream of a coded chunk of `elements` elements: code lengths, block end
/// offsets, raw sign-and-mantissa bytes.
HTP_CODEC_HD std::uint64_t coded_prefix_bytes(const frame_header& h, std::uint64_t elements) {
  return lengths_bytes + 4 * ceil_div(elements, h.block_elements) +
         elements * (h.element_bytes - 1);
}

/// Reads directory entry `i` and checks that the chunk lies after the directory, inside the wire,
/// and is long enough for its kind: enough to decode it without reading outside the frame.
HTP_CODEC_HD status read_entry(const std::uint8_t* w, std::uint64_t wire_bytes,
                               const frame_header& h, std::uint32_t i, chunk_entry* e) {
  const std::uint8_t* p = w + header_bytes + entry_bytes * i;
  e->wire_offset = load_u64(p);
  e->wire_bytes = load_u32(p + 8);
  e->kind = load_u32(p + 12);
  e->checksum = load_u64(p + 16);
  const std::uint64_t dir_end = header_bytes + entry_bytes * std::uint64_t{h.chunk_count};
  if (e->wire_offset < dir_end || e->wire_offset > wire_bytes ||
      e->wire_bytes > wire_bytes - e->wire_offset) {
    return status::bad_chunk_offset;
  }
  const std::uint64_t decoded = chunk_decoded_bytes(h, i);
  if (e->kind == kind_raw) return e->wire_bytes == decoded ? status::ok : status::bad_chunk_length;
  if (e->kind != kind_coded) return status::bad_chunk_kind;
  const std::uint64_t elements = decoded / h.element_bytes;
  if (elements == 0) return status::bad_chunk_length;  // nothing to code: such chunks are raw
  const std::uint64_t fixed = coded_prefix_bytes(h, elements) + decoded % h.element_bytes;
  return e->wire_bytes >= fixed ? status::ok : status::bad_chunk_length;
}

HTP_CODEC_HD unsigned code_length(const std::uint8_t* lengths, unsigned sym) {
  return (lengths[sym / 2] >> (4 * (sym % 2))) & 0xFu;
}

/// Checks the 256 code lengths (each at most max_code_bits, Kraft sum at most 1, at least one
/// symbol) and computes the first canonical code of each length: first[l] for l in 1..12.
HTP_CODEC_HD status first_codes(const std::uint8_t* lengths, std::uint32_t* first) {
  std::uint32_t count[max_code_bits + 1] = {};
  for (unsigned s = 0; s < 256; ++s) {
    const unsigned l = code_length(lengths, s);
    if (l > max_code_bits) return status::bad_code_length;
    ++count[l];
  }
  count[0] = 0;
  std::uint32_t kraft = 0;  // in units of 2^-max_code_bits
  std::uint32_t code = 0;
  for (unsigned l = 1; l <= max_code_bits; ++l) {
    kraft += count[l] << (max_code_bits - l);
    code = (code + count[l - 1]) << 1;
    first[l] = code;
  }
  if (kraft == 0) return status::bad_code_length;
  return kraft <= table_size ? status::ok : status::oversubscribed_code;
}

/// The canonical code of symbol `sym` of length `l` > 0: first[l] plus the number of smaller
/// symbols of the same length.
HTP_CODEC_HD std::uint32_t canonical_code(const std::uint8_t* lengths, const std::uint32_t* first,
                                          unsigned sym, unsigned l) {
  std::uint32_t rank = 0;
  for (unsigned s = 0; s < sym; ++s) rank += code_length(lengths, s) == l ? 1u : 0u;
  return first[l] + rank;
}

/// The low `l` bits of `code` in reverse order: the stream is read least significant bit first.
HTP_CODEC_HD std::uint32_t reverse_bits(std::uint32_t code, unsigned l) {
  std::uint32_t r = 0;
  for (unsigned i = 0; i < l; ++i) r |= ((code >> i) & 1u) << (l - 1 - i);
  return r;
}

/// Fills the decode table entries of one symbol: every 12-bit window whose low `l` bits are its
/// reversed code. An entry is (length << 8) | symbol; 0 marks a window no code starts.
HTP_CODEC_HD void fill_entries(std::uint16_t* table, unsigned sym, unsigned l, std::uint32_t code) {
  const std::uint32_t rev = reverse_bits(code, l);
  const auto entry = static_cast<std::uint16_t>(l << 8 | sym);
  for (std::uint32_t j = 0; j < (1u << (max_code_bits - l)); ++j) table[rev | (j << l)] = entry;
}

/// Stores one decoded element: the symbol goes back below the sign bit, the raw bytes hold the
/// sign (their top bit) and the bits below the symbol.
HTP_CODEC_HD void store_element(std::uint8_t* out, unsigned sym, const std::uint8_t* raw,
                                std::uint32_t element_bytes) {
  if (element_bytes == 2) {
    const unsigned r = raw[0];
    const unsigned w = (r >> 7) << 15 | sym << 7 | (r & 0x7Fu);
#ifdef __CUDA_ARCH__
    if ((reinterpret_cast<std::uintptr_t>(out) & 1u) == 0) {  // one 16-bit store, not two
      *reinterpret_cast<std::uint16_t*>(out) = static_cast<std::uint16_t>(w);
      return;
    }
#endif
    out[0] = static_cast<std::uint8_t>(w);
    out[1] = static_cast<std::uint8_t>(w >> 8);
  } else {
    const std::uint32_t r =
        std::uint32_t{raw[0]} | std::uint32_t{raw[1]} << 8 | std::uint32_t{raw[2]} << 16;
    const std::uint32_t w = (r >> 23) << 31 | std::uint32_t{sym} << 23 | (r & 0x7FFFFFu);
#ifdef __CUDA_ARCH__
    if ((reinterpret_cast<std::uintptr_t>(out) & 3u) == 0) {
      *reinterpret_cast<std::uint32_t*>(out) = w;
      return;
    }
#endif
    out[0] = static_cast<std::uint8_t>(w);
    out[1] = static_cast<std::uint8_t>(w >> 8);
    out[2] = static_cast<std::uint8_t>(w >> 16);
    out[3] = static_cast<std::uint8_t>(w >> 24);
  }
}

/// Where one block's bits are: [begin, end) of the chunk's bitstream of `bits_bytes` bytes, from
/// the block end offsets (block b starts where block b - 1 ends; the last ends at bits_bytes).
HTP_CODEC_HD status block_range(const std::uint8_t* ends, std::uint64_t blocks, std::uint64_t b,
                                std::uint64_t bits_bytes, std::uint64_t* begin,
                                std::uint64_t* end) {
  *begin = b == 0 ? 0 : load_u32(ends + 4 * (b - 1));
  *end = load_u32(ends + 4 * b);
  if (*begin > *end || *end > bits_bytes) return status::bad_block_offset;
  if (b + 1 == blocks && *end != bits_bytes) return status::bad_block_offset;
  return status::ok;
}

/// Decodes (with the element size a constant, so the store is branch-free) `n` elements from the
/// `bytes` bytes of one block's bitstream at `bits`, with their raw bytes at `raw`, into `out`.
/// Reads only [bits, bits + bytes) and n * (element_bytes - 1) raw bytes; a code that is not in the
/// table, bits past the block's end, or unused whole bytes at its end are errors.
template <std::uint32_t element_bytes>
HTP_CODEC_HD status decode_block_of(const std::uint16_t* table, const std::uint8_t* bits,
                                    std::uint64_t bytes, const std::uint8_t* raw, std::uint8_t* out,
                                    std::uint64_t n) {
  std::uint64_t buf = 0;
  unsigned avail = 0;
  std::uint64_t pos = 0;
  std::uint64_t consumed = 0;
  const std::uint64_t total_bits = bytes * 8;
  const std::uint32_t raw_bytes = element_bytes - 1;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (avail < max_code_bits && pos + 8 <= bytes) {
      // Whole bytes up to 56+ bits at once. The byte after the last one counted lands in buf
      // too, where the next refill ORs the same byte into the same place.
      buf |= load_u64(bits + pos) << avail;
      const unsigned take = (63 - avail) >> 3;
      pos += take;
      avail += 8 * take;
    }
    while (avail < max_code_bits) {  // near the end; past it zeros, which the count below catches
      const std::uint64_t byte = pos < bytes ? bits[pos] : 0u;
      buf |= byte << avail;
      avail += 8;
      ++pos;
    }
    const std::uint16_t e = table[buf & (table_size - 1)];
    const unsigned l = e >> 8;
    if (l == 0) return status::bad_code;
    buf >>= l;
    avail -= l;
    consumed += l;
    if (consumed > total_bits) return status::bits_overrun;
    store_element(out + i * element_bytes, e & 0xFFu, raw + i * raw_bytes, element_bytes);
  }
  return (consumed + 7) / 8 == bytes ? status::ok : status::trailing_bytes;
}

/// decode_block_of for a frame's element size (2 or 4).
HTP_CODEC_HD status decode_block(const std::uint16_t* table, const std::uint8_t* bits,
                                 std::uint64_t bytes, const std::uint8_t* raw, std::uint8_t* out,
                                 std::uint64_t n, std::uint32_t element_bytes) {
  return element_bytes == 2 ? decode_block_of<2>(table, bits, bytes, raw, out, n)
                            : decode_block_of<4>(table, bits, bytes, raw, out, n);
}

}  // namespace htp::codec
