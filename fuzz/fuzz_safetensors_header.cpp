// Fuzz target: the safetensors header reader (htp/safetensors.hpp). Byte 0 picks the form, bytes
// 1-4 (big-endian) are how many bytes of data the file has beyond those given, the rest is:
//   byte 0 even: the header's JSON text alone, in a file of 8 + its size + that many bytes;
//   byte 0 odd: the file's first bytes, its 8-byte length included (checked by header_length),
//               whose header is parsed when the bytes given hold all of it.
// The reader must either return a header that keeps every promise (the tensors tile the data from
// data_start to the end of the file, each of its dtype's size times its elements) or throw
// htp::corrupt_data; anything else (another exception, a read outside the bytes) is a crash.
#include "fuzz_input.hpp"

#include <htp/error.hpp>
#include <htp/safetensors.hpp>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Whether `e`'s bytes are its elements times its dtype's size, recomputed here.
bool size_matches(const htp::safetensors::entry& e) {
  const std::size_t bits = htp::safetensors::dtype_bits(e.dtype);
  if (bits == 0) return false;
  std::uint64_t total = bits;
  for (const std::int64_t d : e.shape) {
    // An overflow is a size no file holds: the reader must have refused it.
    if (d < 0 || __builtin_mul_overflow(total, static_cast<std::uint64_t>(d), &total)) return false;
  }
  return total % 8 == 0 && total / 8 == e.bytes;
}

void check(const htp::safetensors::header& h, std::size_t text_bytes, std::uint64_t file_size) {
  HTP_FUZZ_CHECK(h.data_start == 8 + text_bytes, "data_start is not 8 + the header's length");
  HTP_FUZZ_CHECK(h.file_size == file_size, "file_size is not the file's");
  std::uint64_t at = h.data_start;
  std::set<std::string> names;
  for (const auto& e : h.tensors) {
    HTP_FUZZ_CHECK(e.begin == at, "a gap or an overlap between tensors");
    HTP_FUZZ_CHECK(e.end >= e.begin && e.end - e.begin == e.bytes, "bytes is not end - begin");
    HTP_FUZZ_CHECK(size_matches(e), "bytes is not the elements times the dtype's size");
    HTP_FUZZ_CHECK(e.name != "__metadata__", "the metadata read as a tensor");
    HTP_FUZZ_CHECK(names.insert(e.name).second, "a tensor listed twice");
    HTP_FUZZ_CHECK(h.find(e.name) != nullptr, "find misses a tensor");
    at = e.end;
  }
  HTP_FUZZ_CHECK(at == file_size, "the tensors do not end at the end of the file");
}

void parse(std::string_view text, std::uint64_t file_size) {
  // A copy of exactly the header's bytes, so ASan sees any read past its end.
  const std::vector<char> copy(text.begin(), text.end());
  const std::string_view exact(copy.data(), copy.size());
  try {
    check(htp::safetensors::parse_header(exact, file_size, "fuzz"), exact.size(), file_size);
  } catch (const htp::corrupt_data&) {
  }
}

void parse_file(const std::uint8_t* data, std::size_t size, std::uint64_t file_size) {
  std::uint8_t first8[8] = {};
  std::memcpy(first8, data, size < 8 ? size : 8);
  std::uint64_t n = 0;
  try {
    n = htp::safetensors::header_length(first8, file_size, "fuzz");
  } catch (const htp::corrupt_data&) {
    return;
  }
  HTP_FUZZ_CHECK(file_size >= 8 && n <= file_size - 8, "header_length accepted a header too long");
  if (size < 8 || n > size - 8) return;  // the header lies partly in the bytes not given
  parse(std::string_view(reinterpret_cast<const char*>(data) + 8, n), file_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  htp::fuzz::input in(data, 5);
  const bool file_form = (in.byte() & 1) != 0;
  const std::uint64_t beyond = in.u32();
  const std::uint8_t* rest = data + 5;
  const std::size_t rest_size = size - 5;
  if (file_form) {
    parse_file(rest, rest_size, rest_size + beyond);
  } else {
    parse(std::string_view(reinterpret_cast<const char*>(rest), rest_size), 8 + rest_size + beyond);
  }
  return 0;
}
