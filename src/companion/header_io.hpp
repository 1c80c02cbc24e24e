// What the safetensors header reader and the companion index reader share (safetensors.cpp,
// companion.cpp): a read-only file whose failures are htp::io_error with the path and errno, and
// checked reads of JSON values that report a wrong type as `false` instead of a nlohmann error,
// so that the caller names the tensor and the field. Internal; not installed.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace htp::detail {

/// A file opened read-only. `what` names its kind in messages ("safetensors file", "companion").
class header_file {
 public:
  /// @throws htp::io_error (path, errno) if it cannot be opened or examined.
  header_file(const std::string& path, const char* what);
  ~header_file();
  header_file(const header_file&) = delete;
  header_file& operator=(const header_file&) = delete;

  std::uint64_t size() const noexcept { return size_; }
  /// Reads exactly [offset, offset + bytes) into `dst`.
  /// @throws htp::io_error (path, errno; 0 when the file ended early) if it cannot.
  void read(void* dst, std::size_t bytes, std::uint64_t offset) const;

 private:
  std::string path_;
  const char* what_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// The little-endian u64 at `p` (8 bytes).
std::uint64_t load_u64(const std::uint8_t* p) noexcept;

/// `v` as a non-negative integer (a JSON integer >= 0) in `out`; false for anything else (a
/// negative number, a float, a string, ...).
bool as_count(const nlohmann::json& v, std::uint64_t& out) noexcept;

/// `v` as a shape (an array of integers in [0, 2^63)) in `out`; false for anything else, with
/// `bad` the index of the first bad dimension (or SIZE_MAX when `v` is not an array).
bool as_shape(const nlohmann::json& v, std::vector<std::int64_t>& out, std::size_t& bad);

/// The bits of `shape`'s elements at `bits` bits each in `out`; false when that overflows 64 bits.
bool shape_bits(const std::vector<std::int64_t>& shape, std::size_t bits,
                std::uint64_t& out) noexcept;

/// `shape` as text: "[64, 32]".
std::string shape_text(const std::vector<std::int64_t>& shape);

/// `text` for a message, cut to `limit` characters with "..." when longer.
std::string shown(std::string_view text, std::size_t limit = 80);

}  // namespace htp::detail
