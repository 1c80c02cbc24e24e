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

/// Reads the safetensors file at `in` (whole, into memory), checks its header by every rule of
/// the format (safetensors.hpp), encodes each non-empty BF16, F16 and F32 tensor with
/// `chunk_bytes` codec chunks on `threads` threads, and writes the companion to `out` (replacing
/// it). Returns its index. Thread-safe (distinct `out`s).
/// @throws htp::io_error (with the path) if `in` cannot be read or `out` cannot be created or
/// written; htp::corrupt_data (naming the tensor and the field) for a header that breaks the
/// safetensors format; htp::invalid_argument for a chunk_bytes the codec refuses.
index write(const std::string& in, const std::string& out, std::size_t chunk_bytes,
            unsigned threads = 1);

/// Reads a companion's index (only the index: the sequences are verified when registered) and
/// checks it: chunk_bytes positive; each entry's dtype BF16, F16 or F32, its bytes its shape's
/// elements times the dtype's size (never 0), its sequence non-empty, after the index and inside
/// the file; sorted by offset, no sequence starting inside the one before it. Thread-safe.
/// @throws htp::io_error (with the path and errno) if the file cannot be opened or read;
/// htp::invalid_argument for a file that is not a companion at all: one whose index does not
/// name itself "htp-companion" (neither the index nor, when it does not fit or is not JSON, the
/// first 4 KiB after its length hold the tag), or of a version other than 1;
/// htp::corrupt_data (naming the tensor and the field) for a companion whose index is truncated,
/// not JSON, or breaks a rule above.
index read_index(const std::string& path);

/// Registers the tensors `names` of the companion at `path` (all of them when empty) in `p` with
/// pager::register_compressed_file_tensor, by name, over one shared open file. All or nothing: if
/// one fails, those already registered here are unregistered before the error propagates.
/// Thread-safe as the pager's calls are.
/// @throws as read_index does; htp::invalid_argument for a name the companion does not hold (or
/// only lists as skipped), or as register_compressed_file_tensor does (a companion cut for larger
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
