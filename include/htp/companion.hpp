// Compressed companions of safetensors files: each bf16, fp16 or fp32 tensor of the file as a
// chunk-frame sequence (codec.hpp: split_frame), behind a JSON index, so that a pager registers
// them with pager::register_compressed_file_tensor and pages them in compressed. `htp-compress` and
// Python's htp.write_companion write them. See docs/pager.md, "Compressed weights".
//
// Layout: 8 bytes, the index's length N (little-endian u64, as safetensors); N bytes of JSON,
// {"format": "htp-companion", "version": 1, "chunk_bytes": C, "source": path,
//  "tensors": {name: {"dtype", "shape", "bytes", "offset", "wire_bytes"}}, "skipped": [names]},
// where "offset" is the sequence's absolute offset in the companion; then the sequences.
#pragma once

#include <htp/pager.hpp>

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
  std::vector<std::string> skipped;      ///< tensors of other dtypes or empty, left in the source.
};

/// The codec chunk that suits a pager whose pager_config::chunk_bytes is `pager_chunk_bytes`:
/// pieces (a chunk plus its 56-byte header) then fit one engine chunk; 0 when none can.
/// Thread-safe. Never throws.
std::size_t codec_chunk_for(std::size_t pager_chunk_bytes) noexcept;

/// Reads the safetensors file at `in` (whole, into memory), encodes each non-empty BF16, F16 and
/// F32 tensor with `chunk_bytes` codec chunks on `threads` threads, and writes the companion to
/// `out` (replacing it). Returns its index. Thread-safe (distinct `out`s).
/// @throws htp::invalid_argument for an unreadable or malformed safetensors file, or a
/// chunk_bytes the codec refuses; htp::io_error if `out` cannot be created or written.
index write(const std::string& in, const std::string& out, std::size_t chunk_bytes,
            unsigned threads = 1);

/// Reads a companion's index (only the index: the sequences are verified when registered).
/// Thread-safe.
/// @throws htp::invalid_argument for a file that cannot be opened or is not a companion (naming
/// what is wrong with it).
index read_index(const std::string& path);

/// Registers the tensors `names` of the companion at `path` (all of them when empty) in `p` with
/// pager::register_compressed_file_tensor, by name, over one shared open file. All or nothing: if
/// one fails, those already registered here are unregistered before the error propagates.
/// Thread-safe as the pager's calls are.
/// @throws htp::invalid_argument for a name the companion does not hold (or only lists as
/// skipped), or as read_index and register_compressed_file_tensor do (a companion cut for larger
/// chunks than the pager's, a tensor that never fits in HBM, a timing-only device);
/// htp::corrupt_data for a corrupt sequence; htp::io_error if the file cannot be read;
/// htp::out_of_memory if the engine's buffers cannot be made.
std::map<std::string, tensor_handle> register_companion(pager& p, const std::string& path,
                                                        const std::vector<std::string>& names = {});
/// The same with the companion's index already read (read_index(path)), for a caller that needs
/// the entries too (dtype, shape): the index is not read again. Throws as above.
std::map<std::string, tensor_handle> register_companion(pager& p, const std::string& path,
                                                        const index& idx,
                                                        const std::vector<std::string>& names = {});

}  // namespace htp::companion
