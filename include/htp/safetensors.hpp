// The safetensors header, read and checked: where each tensor of a .safetensors checkpoint lies,
// with every rule of the format enforced before a byte of it is trusted. Companion files
// (companion.hpp), Python's Pager.register_safetensors and htp-compress read headers through it.
// See docs/pager.md, "File-backed tensors".
//
// The format: 8 bytes, the header's length N (little-endian u64); N bytes of JSON, an object whose
// optional "__metadata__" is an object of strings and whose every other key names a tensor:
// {"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [begin, end]}, the offsets relative to
// the data, which follows the header; then the data. The rules checked here (those of the format's
// reference reader): N at most max_header_bytes and inside the file; the JSON starts with '{' and
// is an object with no key twice; each tensor a known dtype, a shape of non-negative integers and
// two non-negative integer offsets, begin <= end, end - begin == the shape's elements x the
// dtype's size (whole bytes); sorted by offset, the tensors tile the data exactly: the first starts
// at 0, each starts where the previous one ended (no gap, no overlap), and the last ends at the
// end of the file. Unknown keys inside a tensor's object are ignored, as the reference does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace htp::safetensors {

/// The largest header accepted (100 MB, as the format's reference reader): a larger length is
/// taken for a corrupt or foreign file rather than read into memory.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

/// One tensor of a safetensors file.
struct entry {
  std::string name;                 ///< its key in the header.
  std::string dtype;                ///< the safetensors name: "BF16", "F32", "I64", ...
  std::vector<std::int64_t> shape;  ///< dimensions, each >= 0 ([] for a scalar).
  std::uint64_t begin = 0;          ///< absolute offset of its first byte in the file.
  std::uint64_t end = 0;            ///< absolute offset one past its last byte.
  std::size_t bytes = 0;            ///< end - begin: elements x the dtype's size.
};

/// A safetensors file's header, checked.
struct header {
  std::uint64_t data_start = 0;  ///< 8 + N: where the data (the first tensor) starts.
  std::uint64_t file_size = 0;   ///< the file's size, which the last tensor ends at.
  std::vector<entry> tensors;    ///< in the order of their bytes in the file (by begin).
  std::map<std::string, std::string> metadata;  ///< "__metadata__", empty when absent.

  /// The tensor named `name`, or nullptr. Linear in the number of tensors. Never throws.
  const entry* find(std::string_view name) const noexcept;
};

/// The size in bits of one element of the safetensors dtype `dtype` (8 for "U8", 16 for "BF16",
/// 4 for "F4", ...), or 0 for a name the format does not define. Thread-safe. Never throws.
std::size_t dtype_bits(std::string_view dtype) noexcept;

/// The header's length N, from the file's first 8 bytes `first8` (a little-endian u64), checked
/// against the file's size `file_size` and max_header_bytes. `path` names the file in messages.
/// Thread-safe.
/// @throws htp::corrupt_data naming the path and "header length" if the file is shorter than 8
/// bytes, N is over max_header_bytes, or 8 + N exceeds `file_size`.
std::uint64_t header_length(const std::uint8_t* first8, std::uint64_t file_size,
                            const std::string& path);

/// Parses and checks `text`, the N bytes of JSON after the length of a safetensors file of
/// `file_size` bytes (so the data starts at 8 + text.size()), by every rule above. `path` names
/// the file in messages. Thread-safe.
/// @throws htp::corrupt_data naming the path, the tensor (when one is at fault) and the field
/// ("header", "__metadata__", "dtype", "shape", "data_offsets") with what was expected, for any
/// broken rule; never another htp type.
header parse_header(std::string_view text, std::uint64_t file_size, const std::string& path);

/// Reads the header of the safetensors file at `path` (only the header: 8 + N bytes) and checks it
/// as header_length and parse_header do. Thread-safe.
/// @throws htp::io_error (with the path and the system's errno) if the file cannot be opened,
/// examined or read; htp::corrupt_data as header_length and parse_header.
header read_header(const std::string& path);

}  // namespace htp::safetensors
