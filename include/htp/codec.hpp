// htp's lossless codec for floating-point weights (bf16, fp16, fp32).
//
// A trained weight's exponent carries ~2.6 bits of entropy, not 8 (DFloat11, arXiv 2504.11651).
// The codec splits every element into an 8-bit symbol (the bits just below the sign: the exponent
// of bf16 and fp32, the exponent and top three mantissa bits of fp16), which it Huffman-codes
// (canonical, at most 12 bits a code), and the remaining sign and mantissa bits, which it stores
// raw. The stream is a *frame*: a header, a chunk directory, then independent *chunks* (a few MiB
// of decoded bytes each, so a pager can copy chunk i + 1 while chunk i decodes), each split into
// independent *blocks* (a few thousand elements, each one GPU thread's work) sharing the chunk's
// code table. A chunk that would not shrink is stored raw. Byte layout and limits: docs/codec.md.
//
// Thread safety: every function here is reentrant; concurrent calls on distinct destinations are
// safe, and a frame_view may be read from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace htp {

/// The element type of the weights. The values are the frame's on-wire format byte.
enum class weight_format : std::uint8_t {
  bf16 = 1,  ///< bfloat16: sign, 8 exponent bits, 7 mantissa bits.
  fp16 = 2,  ///< IEEE binary16: sign, 5 exponent bits, 10 mantissa bits.
  fp32 = 3,  ///< IEEE binary32: sign, 8 exponent bits, 23 mantissa bits.
};

/// Returns "bf16", "fp16" or "fp32" ("unknown" for any other value). Never throws.
const char* to_string(weight_format f) noexcept;
/// Bytes of one element: 2 for bf16 and fp16, 4 for fp32 (0 for an unknown value). Never throws.
std::size_t element_bytes(weight_format f) noexcept;

/// How encode_weights cuts the input. The defaults suit a pager: 4 MiB chunks, 4096-element blocks.
struct codec_options {
  /// Decoded bytes per chunk (the last one may be shorter): a multiple of 4, from 4 KiB to 1 GiB.
  std::size_t chunk_bytes = std::size_t{4} << 20;
  /// Elements per block: from 64 to 65536. Smaller blocks give a GPU more threads and cost 4 bytes
  /// of offset each.
  std::size_t block_elements = 4096;
  /// Threads that encode chunks concurrently (1 = the calling thread only; 0 = automatic: up to
  /// the machine's cores, at least 4 chunks each, so a small input stays on the calling thread).
  /// The frame is the same whatever the count.
  unsigned threads = 1;
};

/// An upper bound on the frame encode_weights makes of `bytes` input bytes with `options`:
/// bytes + 32 + 24 per chunk (a chunk is never stored larger than raw). With the default 4 MiB
/// chunks that is at most raw + 0.1% for any input of 56 KiB or more. Never throws (for options
/// encode_weights would refuse it returns the bound for the defaults).
std::size_t max_encoded_bytes(std::size_t bytes, const codec_options& options = {}) noexcept;

/// Encodes `bytes` bytes of `format` weights at `src` into a new frame. `bytes` need not be a
/// multiple of the element size (the remainder is stored raw) and may be 0. Lossless for every bit
/// pattern: NaN payloads, infinities, denormals and negative zero come back bit for bit.
/// Thread-safe (reads `src` only).
/// @throws htp::invalid_argument for a null `src` with bytes > 0, an unknown format, or options
/// outside the ranges above.
std::vector<std::uint8_t> encode_weights(const void* src, std::size_t bytes, weight_format format,
                                         const codec_options& options = {});

/// Encodes as above into the caller's buffer [dst, dst + dst_capacity) and returns the frame's
/// size. A capacity of max_encoded_bytes(bytes, options) always suffices.
/// @throws htp::invalid_argument as above, or when dst_capacity is smaller than the frame (the
/// message gives the size needed); dst may then hold a partial frame.
std::size_t encode_weights(const void* src, std::size_t bytes, weight_format format, void* dst,
                           std::size_t dst_capacity, const codec_options& options = {});

/// One chunk of a frame: where its decoded bytes go and where its coded bytes are.
struct chunk_view {
  std::size_t decoded_offset = 0;  ///< offset of the chunk's bytes in the decoded weights.
  std::size_t decoded_bytes = 0;   ///< decoded size of the chunk.
  std::size_t wire_offset = 0;     ///< offset of the chunk's coded bytes in the frame.
  std::size_t wire_bytes = 0;      ///< coded size of the chunk.
  bool raw = false;                ///< stored as is (it would not shrink).
  std::size_t blocks = 0;          ///< independent blocks inside (0 for a raw chunk).
  std::uint64_t checksum = 0;      ///< htp::checksum of the chunk's coded bytes.
};

/// A parsed, validated frame header over caller-owned bytes (non-owning: the bytes must outlive
/// the view and not change). Made by parse_frame. Copyable; every member is const and never throws.
class frame_view {
 public:
  frame_view() = default;
  weight_format format() const noexcept { return format_; }
  /// Size of the decoded weights.
  std::size_t decoded_bytes() const noexcept { return decoded_bytes_; }
  /// Size of the frame (header, directory and chunks): may be less than the bytes parsed.
  std::size_t wire_bytes() const noexcept { return wire_bytes_; }
  std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
  std::size_t block_elements() const noexcept { return block_elements_; }
  std::size_t chunk_count() const noexcept { return chunks_.size(); }
  /// Chunk i, i < chunk_count() (unchecked).
  const chunk_view& chunk(std::size_t i) const noexcept { return chunks_[i]; }
  /// The frame's first byte.
  const std::uint8_t* data() const noexcept { return data_; }

 private:
  friend frame_view parse_frame(const void* wire, std::size_t wire_bytes);
  const std::uint8_t* data_ = nullptr;
  weight_format format_ = weight_format::bf16;
  std::size_t decoded_bytes_ = 0;
  std::size_t wire_bytes_ = 0;
  std::size_t chunk_bytes_ = 0;
  std::size_t block_elements_ = 0;
  std::vector<chunk_view> chunks_;
};

/// Parses and validates the header and chunk directory of the frame in [wire, wire + wire_bytes):
/// magic, version, format, sizes, and that every chunk lies inside the bytes given, in order,
/// without gaps. Chunk payloads are checked when decoded. Reads nothing outside the range.
/// Thread-safe. @throws htp::corrupt_data saying which check failed.
frame_view parse_frame(const void* wire, std::size_t wire_bytes);

/// Checks the frame in [wire, wire + wire_bytes) without decoding it: parse_frame's checks plus
/// every chunk's checksum, at checksum speed (GB/s). A frame that passes is byte for byte what
/// encode_weights wrote; do this before handing a frame from storage to a device decode without
/// a status word, which does not verify checksums (device::decode_weights_async; with one the
/// device checks them itself). Returns the parsed view. Thread-safe.
/// @throws htp::corrupt_data saying which check failed.
frame_view verify_frame(const void* wire, std::size_t wire_bytes);

/// Decodes the whole frame in [wire, wire + wire_bytes) into [dst, dst + dst_bytes), the CPU
/// reference decoder. `dst_bytes` must equal the decoded size. Thread-safe for distinct dst.
/// @throws htp::invalid_argument for a null pointer; htp::corrupt_data for any malformed byte or a
/// frame whose decoded size is not dst_bytes (never reading outside either range; dst may then
/// hold a partial decode).
void decode_weights(const void* wire, std::size_t wire_bytes, void* dst, std::size_t dst_bytes);

/// Decodes chunk `index` of `frame` alone into [dst, dst + dst_bytes), which receives the chunk's
/// decoded bytes (dst_bytes must equal frame.chunk(index).decoded_bytes). Chunks are independent:
/// decoding each one into its place equals decode_weights. The chunk's checksum is verified
/// first, so a corrupted chunk is reported, never decoded into wrong weights. Thread-safe for
/// distinct dst.
/// @throws htp::invalid_argument for an index out of range, a null dst or a wrong dst_bytes;
/// htp::corrupt_data for a malformed chunk.
void decode_chunk(const frame_view& frame, std::size_t index, void* dst, std::size_t dst_bytes);

/// One piece of a chunk-frame sequence (split_frame): a whole frame holding one chunk.
struct coded_piece {
  std::size_t wire_offset = 0;     ///< where the piece's frame starts in the sequence.
  std::size_t wire_bytes = 0;      ///< the piece's frame size (header, one entry, coded bytes).
  std::size_t decoded_offset = 0;  ///< where its decoded bytes go in the weights.
  std::size_t decoded_bytes = 0;   ///< its decoded size.
};

/// The layout of a chunk-frame sequence: what a pager needs to copy and decode it piece by piece.
struct coded_layout {
  weight_format format = weight_format::bf16;
  std::size_t decoded_bytes = 0;  ///< sum of the pieces' decoded bytes.
  std::size_t wire_bytes = 0;     ///< sum of the pieces' frame sizes.
  std::vector<coded_piece> pieces;
};

/// Re-lays a frame as a *chunk-frame sequence*: each chunk becomes a frame of its own (a 32-byte
/// header, one 24-byte directory entry, the chunk's coded bytes as they are), back to back in
/// chunk order. Each piece decodes alone (decode_weights, device::decode_weights_async) into its
/// place, so a pager copies piece i + 1 while piece i decodes, with no header to rebuild on the
/// device. Costs 32 bytes per chunk over the frame (0.002% at 2 MiB chunks). `frame` should come
/// from verify_frame (the pieces carry its chunk checksums unchanged). Thread-safe.
/// Throws only std::bad_alloc.
std::vector<std::uint8_t> split_frame(const frame_view& frame);

/// Parses the chunk-frame sequence in [wire, wire + wire_bytes) piece by piece with verify_frame
/// (header check and every chunk checksum, no decode) and returns its layout. Every piece must
/// hold exactly one chunk, share the first piece's format and chunk size, and every piece but the
/// last must decode to a full chunk; the pieces must fill the range exactly. Thread-safe.
/// @throws htp::corrupt_data saying which piece and which check failed; htp::invalid_argument
/// for a null pointer with wire_bytes > 0.
coded_layout verify_chunk_frames(const void* wire, std::size_t wire_bytes);

/// The codec chunk whose pieces (a chunk and its 56-byte header, stored raw at worst) fit in
/// `max_piece_bytes`: (max_piece_bytes - 56) rounded down to a multiple of 4, at most 1 GiB; 0
/// when that is under the codec's 4 KiB minimum. A pager passes its chunk_bytes. Never throws.
std::size_t piece_chunk_bytes(std::size_t max_piece_bytes) noexcept;

/// The layout a chunk-frame sequence of `bytes` bytes of `format` weights would have if each chunk
/// (`chunk_bytes` decoded bytes, the last shorter) coded to `ratio` of its size (rounded up, at
/// most its size) plus its 56-byte header: what a timing-only device, which holds no bytes to
/// encode, pages in. Never throws but std::bad_alloc (ratio is clamped to (0, 1]; a chunk_bytes of
/// 0 is taken as the default 4 MiB).
coded_layout model_chunk_frames(std::size_t bytes, weight_format format, std::size_t chunk_bytes,
                                double ratio);

/// The histogram of the 8-bit coded symbols of `bytes` bytes of `format` weights (for bf16 and
/// fp32 the biased exponent; for fp16 the exponent times 8 plus the top three mantissa bits):
/// what the codec's code tables are built from. Never throws for a valid format and range; an
/// unknown format gives all zeros.
std::vector<std::uint64_t> symbol_histogram(const void* src, std::size_t bytes,
                                            weight_format format);

}  // namespace htp
