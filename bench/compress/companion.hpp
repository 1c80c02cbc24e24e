// Compressed companions of safetensors files (htp-compress): each bf16, fp16 or fp32 tensor of the
// file as a chunk-frame sequence (codec.hpp: split_frame), behind a JSON index, so a pager
// registers them with pager::register_compressed_file_tensor. See docs/pager.md, "Compressed
// weights".
//
// Layout: 8 bytes, the index's length N (little-endian u64, as safetensors); N bytes of JSON,
// {"format": "htp-companion", "version": 1, "chunk_bytes": C, "source": path,
//  "tensors": {name: {"dtype", "shape", "bytes", "offset", "wire_bytes"}}, "skipped": [names]},
// where "offset" is the sequence's absolute offset in the companion; then the sequences.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace htp::companion {

/// One tensor of a companion.
struct entry {
  std::string dtype;                ///< "BF16", "F16" or "F32", as in the safetensors file.
  std::vector<std::int64_t> shape;  ///< as in the safetensors file.
  std::size_t bytes = 0;            ///< decoded size.
  std::uint64_t offset = 0;         ///< where its chunk-frame sequence starts in the companion.
  std::size_t wire_bytes = 0;       ///< the sequence's size.
};

/// A companion's index.
struct index {
  std::size_t chunk_bytes = 0;           ///< the codec chunk the sequences were cut with.
  std::map<std::string, entry> tensors;  ///< by name.
  std::vector<std::string> skipped;      ///< tensors of other dtypes, left in the source.
};

/// The codec chunk that suits a pager whose pager_config::chunk_bytes is `pager_chunk_bytes`:
/// pieces (a chunk plus its 56-byte header) then fit one engine chunk. Never throws.
std::size_t codec_chunk_for(std::size_t pager_chunk_bytes) noexcept;

/// Reads the safetensors file at `in`, encodes each BF16, F16 and F32 tensor with `chunk_bytes`
/// codec chunks on `threads` threads, and writes the companion to `out`. Returns its index.
/// @throws htp::invalid_argument for an unreadable or malformed safetensors file;
/// htp::io_error if `out` cannot be written.
index write(const std::string& in, const std::string& out, std::size_t chunk_bytes,
            unsigned threads = 1);

/// Reads a companion's index. @throws htp::invalid_argument for a file that is not a companion.
index read_index(const std::string& path);

}  // namespace htp::companion
