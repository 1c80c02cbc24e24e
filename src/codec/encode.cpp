// The codec's encoder: chunks coded independently (optionally on several threads), then the frame
// written as header, directory and chunks. Layout: docs/codec.md and format.hpp.
#include <htp/checksum.hpp>
#include <htp/codec.hpp>
#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <htp/detail/codec_format.hpp>
#include "codec/huffman.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

namespace htp {
namespace {

/// One element split into its coded symbol and its raw bits (sign on top of the bits below the
/// symbol), for 2- and 4-byte elements read little-endian.
struct split {
  unsigned sym;
  std::uint32_t raw;
};

inline split split_element(const std::uint8_t* p, std::uint32_t element_bytes) {
  if (element_bytes == 2) {
    const unsigned w = p[0] | unsigned{p[1]} << 8;
    return {(w >> 7) & 0xFFu, (w >> 15) << 7 | (w & 0x7Fu)};
  }
  std::uint32_t w = 0;
  std::memcpy(&w, p, 4);  // little-endian host (x86-64, aarch64)
  return {(w >> 23) & 0xFFu, (w >> 31) << 23 | (w & 0x7FFFFFu)};
}

struct coded_chunk {
  std::vector<std::uint8_t> bytes;
  bool raw = false;
};

/// The canonical code of each symbol, bit-reversed for the least-significant-bit-first stream.
std::array<std::uint32_t, 256> reversed_codes(const std::array<std::uint8_t, 256>& lengths) {
  std::array<std::uint32_t, 256> codes{};
  std::uint32_t count[codec::max_code_bits + 1] = {};
  for (auto l : lengths) ++count[l];
  count[0] = 0;
  std::uint32_t next[codec::max_code_bits + 1] = {};
  std::uint32_t code = 0;
  for (unsigned l = 1; l <= codec::max_code_bits; ++l) {
    code = (code + count[l - 1]) << 1;
    next[l] = code;
  }
  for (unsigned s = 0; s < 256; ++s) {
    if (lengths[s] != 0) codes[s] = codec::reverse_bits(next[lengths[s]]++, lengths[s]);
  }
  return codes;
}

/// Writes the bitstream of every block and its end offset; returns the bitstream's size.
std::size_t write_blocks(const std::uint8_t* src, std::size_t n, std::uint32_t element_bytes,
                         std::size_t block_elements, const std::array<std::uint8_t, 256>& lengths,
                         std::uint8_t* ends, std::uint8_t* bits) {
  const std::array<std::uint32_t, 256> codes = reversed_codes(lengths);
  std::size_t pos = 0;
  for (std::size_t first = 0, b = 0; first < n; first += block_elements, ++b) {
    const std::size_t last = std::min(n, first + block_elements);
    std::uint64_t acc = 0;
    unsigned held = 0;
    for (std::size_t i = first; i < last; ++i) {
      const unsigned sym = split_element(src + i * element_bytes, element_bytes).sym;
      acc |= std::uint64_t{codes[sym]} << held;
      held += lengths[sym];
      if (held >= 32) {
        for (int k = 0; k < 4; ++k) bits[pos++] = static_cast<std::uint8_t>(acc >> (8 * k));
        acc >>= 32;
        held -= 32;
      }
    }
    for (; held > 0; held = held > 8 ? held - 8 : 0, acc >>= 8) {
      bits[pos++] = static_cast<std::uint8_t>(acc);
    }
    const auto end = static_cast<std::uint32_t>(pos);
    for (int k = 0; k < 4; ++k) ends[4 * b + k] = static_cast<std::uint8_t>(end >> (8 * k));
  }
  return pos;
}

/// Writes the raw bytes of n elements: element_bytes - 1 bytes each, little-endian.
void write_raw(const std::uint8_t* src, std::size_t n, std::uint32_t element_bytes,
               std::uint8_t* out) {
  const std::uint32_t r = element_bytes - 1;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t raw = split_element(src + i * element_bytes, element_bytes).raw;
    for (std::uint32_t k = 0; k < r; ++k)
      out[i * r + k] = static_cast<std::uint8_t>(raw >> (8 * k));
  }
}

coded_chunk raw_chunk(const std::uint8_t* src, std::size_t bytes) {
  coded_chunk c;
  c.raw = true;
  c.bytes.assign(src, src + bytes);
  return c;
}

/// Codes one chunk, or stores it raw when coding would not make it smaller.
coded_chunk encode_chunk(const std::uint8_t* src, std::size_t bytes, std::uint32_t element_bytes,
                         std::size_t block_elements) {
  const std::size_t n = bytes / element_bytes;
  const std::size_t tail = bytes % element_bytes;
  if (n == 0) return raw_chunk(src, bytes);
  std::array<std::uint64_t, 256> freq{};
  for (std::size_t i = 0; i < n; ++i)
    ++freq[split_element(src + i * element_bytes, element_bytes).sym];
  const std::array<std::uint8_t, 256> lengths = codec::limited_code_lengths(freq);
  std::uint64_t code_bits = 0;
  for (int s = 0; s < 256; ++s) code_bits += freq[s] * lengths[s];
  const std::size_t blocks = (n + block_elements - 1) / block_elements;
  const std::size_t prefix = codec::lengths_bytes + 4 * blocks + n * (element_bytes - 1);
  // Each block rounds up to whole bytes: at most `blocks` + 1 more than code_bits / 8.
  if (prefix + code_bits / 8 + tail >= bytes) return raw_chunk(src, bytes);
  coded_chunk c;
  c.bytes.resize(prefix + code_bits / 8 + blocks + 1 + tail);
  std::uint8_t* out = c.bytes.data();
  for (unsigned s = 0; s < 256; s += 2)
    out[s / 2] = static_cast<std::uint8_t>(lengths[s] | lengths[s + 1] << 4);
  write_raw(src, n, element_bytes, out + codec::lengths_bytes + 4 * blocks);
  const std::size_t bits = write_blocks(src, n, element_bytes, block_elements, lengths,
                                        out + codec::lengths_bytes, out + prefix);
  std::memcpy(out + prefix + bits, src + n * element_bytes, tail);
  c.bytes.resize(prefix + bits + tail);
  if (c.bytes.size() >= bytes) return raw_chunk(src, bytes);
  return c;
}

void check_arguments(const void* src, std::size_t bytes, weight_format format,
                     const codec_options& o) {
  HTP_EXPECTS(src != nullptr || bytes == 0, invalid_argument, "encode_weights: null source of ",
              bytes, " bytes");
  HTP_EXPECTS(element_bytes(format) != 0, invalid_argument, "encode_weights: unknown format ",
              static_cast<int>(format));
  HTP_EXPECTS(o.chunk_bytes % 4 == 0 && o.chunk_bytes >= codec::min_chunk_bytes &&
                  o.chunk_bytes <= codec::max_chunk_bytes,
              invalid_argument, "encode_weights: chunk_bytes ", o.chunk_bytes,
              " must be a multiple of 4 from 4096 to 2^30");
  HTP_EXPECTS(o.block_elements >= codec::min_block_elements &&
                  o.block_elements <= codec::max_block_elements,
              invalid_argument, "encode_weights: block_elements ", o.block_elements,
              " must be from 64 to 65536");
}

/// Codes every chunk, on up to o.threads threads; rethrows the first failure.
std::vector<coded_chunk> encode_chunks(const std::uint8_t* src, std::size_t bytes,
                                       std::uint32_t element_bytes, const codec_options& o) {
  const std::size_t count = (bytes + o.chunk_bytes - 1) / o.chunk_bytes;
  std::vector<coded_chunk> chunks(count);
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        const std::size_t off = i * o.chunk_bytes;
        chunks[i] = encode_chunk(src + off, std::min(o.chunk_bytes, bytes - off), element_bytes,
                                 o.block_elements);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> helpers;
  const std::size_t threads =
      o.threads != 0 ? o.threads
                     : std::min<std::size_t>(std::max(1u, std::thread::hardware_concurrency()),
                                             std::max<std::size_t>(1, count / 4));
  const std::size_t extra = std::min<std::size_t>(threads - 1, count);
  for (std::size_t t = 0; t < extra; ++t) helpers.emplace_back(work);
  work();
  for (auto& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
  return chunks;
}

std::size_t frame_size(const std::vector<coded_chunk>& chunks) {
  std::size_t n = codec::header_bytes + codec::entry_bytes * chunks.size();
  for (const auto& c : chunks) n += c.bytes.size();
  return n;
}

void store_le(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) p[k] = static_cast<std::uint8_t>(v >> (8 * k));
}

/// The header's check word: htp::checksum of the header's first 28 bytes and of the directory,
/// folded to 32 bits. The chunks carry their own checksums.
std::uint32_t codec_header_check(const std::uint8_t* frame, std::size_t chunks) {
  const std::uint64_t sum =
      checksum(frame, 28) ^ checksum(frame + codec::header_bytes, codec::entry_bytes * chunks) * 3;
  return static_cast<std::uint32_t>(sum ^ (sum >> 32));
}

void write_frame(const std::vector<coded_chunk>& chunks, std::size_t bytes, weight_format format,
                 const codec_options& o, std::uint8_t* out) {
  std::memset(out, 0, codec::header_bytes);
  store_le(out, codec::magic, 4);
  out[4] = codec::version;
  out[5] = static_cast<std::uint8_t>(format);
  store_le(out + 8, bytes, 8);
  store_le(out + 16, o.chunk_bytes, 4);
  store_le(out + 20, o.block_elements, 4);
  store_le(out + 24, chunks.size(), 4);
  std::size_t pos = codec::header_bytes + codec::entry_bytes * chunks.size();
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    std::uint8_t* e = out + codec::header_bytes + codec::entry_bytes * i;
    store_le(e, pos, 8);
    store_le(e + 8, chunks[i].bytes.size(), 4);
    store_le(e + 12, chunks[i].raw ? codec::kind_raw : codec::kind_coded, 4);
    store_le(e + 16, checksum(chunks[i].bytes.data(), chunks[i].bytes.size()), 8);
    if (!chunks[i].bytes.empty())
      std::memcpy(out + pos, chunks[i].bytes.data(), chunks[i].bytes.size());
    pos += chunks[i].bytes.size();
  }
  store_le(out + 28, codec_header_check(out, chunks.size()), 4);
}

}  // namespace

const char* to_string(weight_format f) noexcept {
  switch (f) {
    case weight_format::bf16: return "bf16";
    case weight_format::fp16: return "fp16";
    case weight_format::fp32: return "fp32";
  }
  return "unknown";
}

std::size_t element_bytes(weight_format f) noexcept {
  return codec::element_bytes_of(static_cast<std::uint8_t>(f));
}

std::size_t max_encoded_bytes(std::size_t bytes, const codec_options& options) noexcept {
  std::size_t chunk = options.chunk_bytes;
  if (chunk % 4 != 0 || chunk < codec::min_chunk_bytes || chunk > codec::max_chunk_bytes) {
    chunk = codec_options{}.chunk_bytes;
  }
  return bytes + codec::header_bytes + codec::entry_bytes * ((bytes + chunk - 1) / chunk);
}

std::vector<std::uint8_t> encode_weights(const void* src, std::size_t bytes, weight_format format,
                                         const codec_options& options) {
  check_arguments(src, bytes, format, options);
  const auto chunks = encode_chunks(static_cast<const std::uint8_t*>(src), bytes,
                                    static_cast<std::uint32_t>(element_bytes(format)), options);
  std::vector<std::uint8_t> frame(frame_size(chunks));
  write_frame(chunks, bytes, format, options, frame.data());
  return frame;
}

std::size_t encode_weights(const void* src, std::size_t bytes, weight_format format, void* dst,
                           std::size_t dst_capacity, const codec_options& options) {
  check_arguments(src, bytes, format, options);
  const auto chunks = encode_chunks(static_cast<const std::uint8_t*>(src), bytes,
                                    static_cast<std::uint32_t>(element_bytes(format)), options);
  const std::size_t size = frame_size(chunks);
  HTP_EXPECTS(dst != nullptr && dst_capacity >= size, invalid_argument,
              "encode_weights: the frame needs ", size, " bytes; the destination holds ",
              dst_capacity, " (max_encoded_bytes gives a size that always suffices)");
  write_frame(chunks, bytes, format, options, static_cast<std::uint8_t*>(dst));
  return size;
}

std::vector<std::uint64_t> symbol_histogram(const void* src, std::size_t bytes,
                                            weight_format format) {
  std::vector<std::uint64_t> h(256, 0);
  const auto w = static_cast<std::uint32_t>(element_bytes(format));
  if (w == 0 || src == nullptr) return h;
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::size_t i = 0; i + w <= bytes; i += w) ++h[split_element(p + i, w).sym];
  return h;
}

}  // namespace htp
