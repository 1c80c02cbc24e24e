// Chunk-frame sequences: a frame re-laid as one frame per chunk, so a pager can copy and decode
// piece by piece (docs/codec.md, "Chunk-frame sequences").
#include <htp/checksum.hpp>
#include <htp/codec.hpp>
#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <htp/detail/codec_format.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace htp {

namespace {

void store_le(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) p[k] = static_cast<std::uint8_t>(v >> (8 * k));
}

}  // namespace

std::vector<std::uint8_t> split_frame(const frame_view& frame) {
  constexpr std::size_t head = codec::header_bytes + codec::entry_bytes;
  std::size_t total = 0;
  for (std::size_t i = 0; i < frame.chunk_count(); ++i) total += head + frame.chunk(i).wire_bytes;
  std::vector<std::uint8_t> out(total, 0);
  std::size_t pos = 0;
  for (std::size_t i = 0; i < frame.chunk_count(); ++i) {
    const chunk_view& c = frame.chunk(i);
    std::uint8_t* w = out.data() + pos;
    store_le(w, codec::magic, 4);
    w[4] = codec::version;
    w[5] = static_cast<std::uint8_t>(frame.format());
    store_le(w + 8, c.decoded_bytes, 8);
    store_le(w + 16, frame.chunk_bytes(), 4);
    store_le(w + 20, frame.block_elements(), 4);
    store_le(w + 24, 1, 4);
    std::uint8_t* e = w + codec::header_bytes;
    store_le(e, head, 8);
    store_le(e + 8, c.wire_bytes, 4);
    store_le(e + 12, c.raw ? codec::kind_raw : codec::kind_coded, 4);
    store_le(e + 16, c.checksum, 8);
    const std::uint64_t sum = checksum(w, 28) ^ checksum(e, codec::entry_bytes) * 3;
    store_le(w + 28, static_cast<std::uint32_t>(sum ^ (sum >> 32)), 4);
    if (c.wire_bytes != 0) std::memcpy(w + head, frame.data() + c.wire_offset, c.wire_bytes);
    pos += head + c.wire_bytes;
  }
  return out;
}

std::size_t piece_chunk_bytes(std::size_t max_piece_bytes) noexcept {
  constexpr std::size_t head = codec::header_bytes + codec::entry_bytes;
  if (max_piece_bytes < head + codec::min_chunk_bytes) return 0;
  return std::min<std::size_t>((max_piece_bytes - head) / 4 * 4, codec::max_chunk_bytes);
}

coded_layout model_chunk_frames(std::size_t bytes, weight_format format, std::size_t chunk_bytes,
                                double ratio) {
  constexpr std::size_t head = codec::header_bytes + codec::entry_bytes;
  if (chunk_bytes == 0) chunk_bytes = codec_options{}.chunk_bytes;
  ratio = ratio > 1 || !(ratio > 0) ? 1.0 : ratio;
  coded_layout l;
  l.format = format;
  for (std::size_t off = 0; off < bytes; off += chunk_bytes) {
    const std::size_t n = std::min(chunk_bytes, bytes - off);
    const auto wire = std::min<std::size_t>(
        n, static_cast<std::size_t>(std::ceil(static_cast<double>(n) * ratio)));
    l.pieces.push_back({l.wire_bytes, wire + head, off, n});
    l.wire_bytes += wire + head;
  }
  l.decoded_bytes = bytes;
  return l;
}

coded_layout verify_chunk_frames(const void* wire, std::size_t wire_bytes) {
  HTP_EXPECTS(wire != nullptr || wire_bytes == 0, invalid_argument,
              "verify_chunk_frames: a null pointer");
  const auto* w = static_cast<const std::uint8_t*>(wire);
  coded_layout layout;
  std::size_t chunk_bytes = 0;
  std::size_t pos = 0;
  while (pos < wire_bytes) {
    const std::size_t i = layout.pieces.size();
    frame_view f;
    try {
      f = verify_frame(w + pos, wire_bytes - pos);
    } catch (const corrupt_data& e) {
      throw corrupt_data(
          detail::concat("chunk-frame sequence: piece ", i, " at byte ", pos, ": ", e.what()));
    }
    const bool first = i == 0;
    if (first) {
      layout.format = f.format();
      chunk_bytes = f.chunk_bytes();
    }
    const bool prev_full = first || layout.pieces.back().decoded_bytes == chunk_bytes;
    if (f.chunk_count() != 1 || f.format() != layout.format || f.chunk_bytes() != chunk_bytes ||
        !prev_full) {
      throw corrupt_data(detail::concat(
          "chunk-frame sequence: piece ", i, " at byte ", pos, " holds ", f.chunk_count(),
          " chunks of ", f.chunk_bytes(), " bytes (", to_string(f.format()),
          "); every piece must hold one chunk of the first piece's size and format, and only the "
          "last may be short"));
    }
    layout.pieces.push_back({pos, f.wire_bytes(), layout.decoded_bytes, f.decoded_bytes()});
    layout.decoded_bytes += f.decoded_bytes();
    pos += f.wire_bytes();
  }
  layout.wire_bytes = pos;
  return layout;
}

}  // namespace htp
