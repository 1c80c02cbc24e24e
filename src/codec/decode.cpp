// The codec's CPU reference decoder: frame parsing and chunk decoding over format.hpp's steps,
// turning each failed step into htp::corrupt_data.
#include <htp/checksum.hpp>
#include <htp/codec.hpp>
#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <htp/detail/codec_format.hpp>

#include <cstring>

namespace htp {

const char* codec::describe(codec::status s) noexcept {
  using codec::status;
  switch (s) {
    case status::ok: return "no error";
    case status::truncated_header: return "fewer bytes than a frame header (32)";
    case status::bad_magic: return "the magic number is not HTPW: not an htp-coded weight stream";
    case status::bad_version: return "unknown format version";
    case status::bad_format: return "unknown weight format byte";
    case status::bad_reserved: return "reserved header bytes are not zero";
    case status::bad_chunk_size: return "chunk size out of range or not a multiple of 4";
    case status::bad_block_size: return "block size out of range";
    case status::bad_chunk_count:
      return "chunk count disagrees with the decoded size, or the directory overruns the bytes";
    case status::bad_chunk_offset: return "a chunk lies outside the frame or overlaps the header";
    case status::bad_chunk_kind: return "a chunk is neither coded nor raw";
    case status::bad_chunk_length: return "a chunk's length is wrong for its decoded size";
    case status::bad_header_checksum: return "the header or chunk directory fails its check word";
    case status::bad_chunk_checksum: return "a chunk's bytes do not match its checksum";
    case status::bad_code_length: return "a code length over 12 bits, or no code at all";
    case status::oversubscribed_code: return "the code lengths are over-subscribed (Kraft sum > 1)";
    case status::bad_block_offset: return "a block offset is out of order or past the bitstream";
    case status::bad_code: return "the bits hold a code that is not in the chunk's table";
    case status::bits_overrun: return "a block's codes run past the end of its bytes";
    case status::trailing_bytes: return "a block has whole bytes its codes do not use";
    case status::wrong_decoded_size:
      return "the frame decodes to another size than its destination holds";
  }
  return "unknown error";
}

namespace {

/// The header check word of a frame whose header parsed (32 bits of two checksums).
std::uint32_t header_check(const std::uint8_t* w, std::uint32_t chunk_count) {
  const std::uint64_t sum =
      checksum(w, 28) ^ checksum(w + codec::header_bytes, codec::entry_bytes * chunk_count) * 3;
  return static_cast<std::uint32_t>(sum ^ (sum >> 32));
}

[[noreturn]] void fail(codec::status s, const char* where, std::size_t index) {
  throw corrupt_data(detail::concat("htp codec: corrupt stream (", where, " ", index,
                                    "): ", codec::describe(s),
                                    ". Re-read the source or re-encode the weights."));
}

void check(codec::status s, const char* where, std::size_t index) {
  if (s != codec::status::ok) fail(s, where, index);
}

/// Builds the decode table of a coded chunk from its 128 bytes of code lengths.
void build_table(const std::uint8_t* lengths, std::uint16_t* table, std::size_t chunk) {
  std::uint32_t first[codec::max_code_bits + 1] = {};
  check(codec::first_codes(lengths, first), "chunk", chunk);
  std::memset(table, 0, codec::table_size * sizeof(std::uint16_t));
  std::uint32_t next[codec::max_code_bits + 1];
  std::memcpy(next, first, sizeof(next));
  for (unsigned s = 0; s < 256; ++s) {  // canonical order: by length, then by symbol
    const unsigned l = codec::code_length(lengths, s);
    if (l != 0) codec::fill_entries(table, s, l, next[l]++);
  }
}

codec::frame_header header_of(const frame_view& f) {
  codec::frame_header h{};
  h.decoded_bytes = f.decoded_bytes();
  h.chunk_bytes = static_cast<std::uint32_t>(f.chunk_bytes());
  h.block_elements = static_cast<std::uint32_t>(f.block_elements());
  h.chunk_count = static_cast<std::uint32_t>(f.chunk_count());
  h.element_bytes = static_cast<std::uint32_t>(element_bytes(f.format()));
  h.format = static_cast<std::uint8_t>(f.format());
  return h;
}

void decode_coded_chunk(const frame_view& f, std::size_t index, std::uint8_t* dst) {
  const chunk_view& c = f.chunk(index);
  const codec::frame_header h = header_of(f);
  const std::uint8_t* w = f.data() + c.wire_offset;
  const std::uint64_t n = c.decoded_bytes / h.element_bytes;
  const std::uint64_t tail = c.decoded_bytes % h.element_bytes;
  const std::uint64_t prefix = codec::coded_prefix_bytes(h, n);
  const std::uint64_t bits_bytes = c.wire_bytes - prefix - tail;  // read_entry checked the sum
  std::uint16_t table[codec::table_size];
  build_table(w, table, index);
  const std::uint8_t* ends = w + codec::lengths_bytes;
  const std::uint8_t* raw = ends + 4 * c.blocks;
  const std::uint8_t* bits = w + prefix;
  for (std::uint64_t b = 0; b < c.blocks; ++b) {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    check(codec::block_range(ends, c.blocks, b, bits_bytes, &begin, &end), "block", b);
    const std::uint64_t first = b * h.block_elements;
    const std::uint64_t count = n - first < h.block_elements ? n - first : h.block_elements;
    check(codec::decode_block(table, bits + begin, end - begin, raw + first * (h.element_bytes - 1),
                              dst + first * h.element_bytes, count, h.element_bytes),
          "block", b);
  }
  std::memcpy(dst + n * h.element_bytes, bits + bits_bytes, tail);
}

}  // namespace

frame_view parse_frame(const void* wire, std::size_t wire_bytes) {
  HTP_EXPECTS(wire != nullptr || wire_bytes == 0, invalid_argument,
              "parse_frame: a null frame pointer");
  const auto* w = static_cast<const std::uint8_t*>(wire);
  codec::frame_header h{};
  check(codec::parse_header(w, wire_bytes, &h), "header", 0);
  if (codec::load_u32(w + 28) != header_check(w, h.chunk_count)) {
    fail(codec::status::bad_header_checksum, "header", 0);
  }
  frame_view f;
  f.data_ = w;
  f.format_ = static_cast<weight_format>(h.format);
  f.decoded_bytes_ = h.decoded_bytes;
  f.chunk_bytes_ = h.chunk_bytes;
  f.block_elements_ = h.block_elements;
  f.chunks_.resize(h.chunk_count);
  std::uint64_t expected = codec::header_bytes + codec::entry_bytes * std::uint64_t{h.chunk_count};
  for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
    codec::chunk_entry e{};
    check(codec::read_entry(w, wire_bytes, h, i, &e), "chunk", i);
    if (e.wire_offset != expected) fail(codec::status::bad_chunk_offset, "chunk", i);
    expected += e.wire_bytes;
    chunk_view& c = f.chunks_[i];
    c.decoded_offset = std::size_t{i} * h.chunk_bytes;
    c.decoded_bytes = codec::chunk_decoded_bytes(h, i);
    c.wire_offset = e.wire_offset;
    c.wire_bytes = e.wire_bytes;
    c.raw = e.kind == codec::kind_raw;
    c.checksum = e.checksum;
    c.blocks = c.raw ? 0 : codec::ceil_div(c.decoded_bytes / h.element_bytes, h.block_elements);
  }
  f.wire_bytes_ = expected;
  return f;
}

frame_view verify_frame(const void* wire, std::size_t wire_bytes) {
  frame_view f = parse_frame(wire, wire_bytes);
  for (std::size_t i = 0; i < f.chunk_count(); ++i) {
    const chunk_view& c = f.chunk(i);
    if (checksum(f.data() + c.wire_offset, c.wire_bytes) != c.checksum) {
      fail(codec::status::bad_chunk_checksum, "chunk", i);
    }
  }
  return f;
}

void decode_chunk(const frame_view& frame, std::size_t index, void* dst, std::size_t dst_bytes) {
  HTP_EXPECTS(index < frame.chunk_count(), invalid_argument, "decode_chunk: chunk ", index,
              " of a frame of ", frame.chunk_count(), " chunks");
  const chunk_view& c = frame.chunk(index);
  HTP_EXPECTS(dst != nullptr && dst_bytes == c.decoded_bytes, invalid_argument,
              "decode_chunk: chunk ", index, " decodes to ", c.decoded_bytes,
              " bytes; give a non-null destination of exactly that size, not ", dst_bytes);
  if (checksum(frame.data() + c.wire_offset, c.wire_bytes) != c.checksum) {
    fail(codec::status::bad_chunk_checksum, "chunk", index);
  }
  if (c.raw) {
    std::memcpy(dst, frame.data() + c.wire_offset, c.wire_bytes);
    return;
  }
  decode_coded_chunk(frame, index, static_cast<std::uint8_t*>(dst));
}

void decode_weights(const void* wire, std::size_t wire_bytes, void* dst, std::size_t dst_bytes) {
  HTP_EXPECTS(wire != nullptr && (dst != nullptr || dst_bytes == 0), invalid_argument,
              "decode_weights: null pointer (wire ", wire, ", dst ", dst, ")");
  const frame_view f = parse_frame(wire, wire_bytes);
  if (dst_bytes != f.decoded_bytes()) {
    throw corrupt_data(detail::concat("htp codec: the frame decodes to ", f.decoded_bytes(),
                                      " bytes but the destination holds ", dst_bytes,
                                      ": not the stream expected, or its header is corrupt"));
  }
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::size_t i = 0; i < f.chunk_count(); ++i) {
    decode_chunk(f, i, out + f.chunk(i).decoded_offset, f.chunk(i).decoded_bytes);
  }
}

codec::status codec::check_frame(const std::uint8_t* wire, std::uint64_t wire_bytes,
                                 std::uint64_t dst_bytes) noexcept {
  frame_header h{};
  if (const status s = parse_header(wire, wire_bytes, &h); s != status::ok) return s;
  if (h.decoded_bytes != dst_bytes) return status::wrong_decoded_size;
  if (load_u32(wire + 28) != header_check(wire, h.chunk_count)) return status::bad_header_checksum;
  for (std::uint32_t i = 0; i < h.chunk_count; ++i) {
    chunk_entry e{};
    if (const status s = read_entry(wire, wire_bytes, h, i, &e); s != status::ok) return s;
    if (htp::checksum(wire + e.wire_offset, e.wire_bytes) != e.checksum) {
      return status::bad_chunk_checksum;
    }
  }
  return status::ok;
}

}  // namespace htp
