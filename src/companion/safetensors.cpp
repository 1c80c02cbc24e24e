// The safetensors header reader and its checks (safetensors.hpp).
#include <htp/safetensors.hpp>

#include "header_io.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <tuple>

namespace htp::safetensors {

namespace {

using json = nlohmann::json;

// The format's dtypes and their sizes in bits (the reference reader's list).
struct known_dtype {
  std::string_view name;
  std::size_t bits;
};
constexpr known_dtype k_dtypes[] = {
    {"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
    {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
    {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
    {"I64", 64},        {"U64", 64},
};

// Throws the corrupt_data every broken rule is: the file, the tensor (when one is at fault), the
// field, what was found and what was expected.
template <typename... Parts>
[[noreturn]] void corrupt(const std::string& path, std::string_view tensor, std::string_view field,
                          const Parts&... what) {
  std::string where = tensor.empty() ? std::string() : detail::concat("tensor '", tensor, "', ");
  throw corrupt_data(detail::concat("safetensors file '", path, "': ", where, "\"", field,
                                    "\": ", detail::concat(what...),
                                    " (the header breaks the safetensors format: re-export or "
                                    "re-download the file)"));
}

// The JSON object of the header, with no top-level key twice (JSON allows it, the format's
// tensors cannot: one of the two would be silently dropped).
json parse_object(std::string_view text, const std::string& path) {
  if (text.empty() || text.front() != '{') {
    corrupt(path, "", "header", "expected a JSON object starting with '{', found ",
            text.empty() ? std::string("nothing") : "'" + detail::shown(text.substr(0, 16)) + "'");
  }
  std::set<std::string> seen;
  std::string twice;
  const auto note_key = [&seen, &twice](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && twice.empty() &&
        !seen.insert(parsed.get<std::string>()).second) {
      twice = parsed.get<std::string>();
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), note_key);
  } catch (const json::exception& e) {
    corrupt(path, "", "header", "not valid JSON: ", e.what());
  }
  if (!twice.empty()) corrupt(path, twice, "header", "the name appears twice in the header");
  if (!j.is_object()) corrupt(path, "", "header", "expected a JSON object, found ", j.type_name());
  return j;
}

std::map<std::string, std::string> metadata_of(const json& m, const std::string& path) {
  if (!m.is_object())
    corrupt(path, "", "__metadata__", "expected an object, found ", m.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) {
      corrupt(path, "", "__metadata__", "the value of '", key, "' is ", value.type_name(),
              "; expected a string");
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

const json& field_of(const json& t, const char* field, const std::string& name,
                     const std::string& path) {
  const auto it = t.find(field);
  if (it == t.end()) corrupt(path, name, field, "missing");
  return *it;
}

// The tensor's dtype and shape, checked, into `e`; returns the bytes they take.
std::uint64_t dtype_and_shape(const json& t, entry& e, const std::string& path) {
  const json& d = field_of(t, "dtype", e.name, path);
  if (!d.is_string()) corrupt(path, e.name, "dtype", "expected a string, found ", d.type_name());
  e.dtype = d.get<std::string>();
  const std::size_t bits = dtype_bits(e.dtype);
  if (bits == 0) {
    corrupt(path, e.name, "dtype", "'", detail::shown(e.dtype),
            "' is not a safetensors dtype (BOOL, U8, I8, F8_E4M3, F16, BF16, F32, F64, I64, ...)");
  }
  const json& s = field_of(t, "shape", e.name, path);
  std::size_t bad = 0;
  if (!detail::as_shape(s, e.shape, bad)) {
    if (!s.is_array()) corrupt(path, e.name, "shape", "expected an array, found ", s.type_name());
    corrupt(path, e.name, "shape", "dimension ", bad, " is ", detail::shown(s[bad].dump()),
            "; expected a non-negative integer");
  }
  std::uint64_t total_bits = 0;
  if (!detail::shape_bits(e.shape, bits, total_bits)) {
    corrupt(path, e.name, "shape", detail::shape_text(e.shape), " of ", e.dtype,
            " is more bytes than any file holds");
  }
  if (total_bits % 8 != 0) {
    corrupt(path, e.name, "shape", detail::shape_text(e.shape), " of ", e.dtype, " (", bits,
            " bits each) is not a whole number of bytes");
  }
  return total_bits / 8;
}

// One tensor's entry, checked on its own: fields, types, and a span inside the data that holds
// exactly its elements.
entry entry_of(const std::string& name, const json& t, std::uint64_t data_start,
               std::uint64_t file_size, const std::string& path) {
  if (!t.is_object()) {
    corrupt(path, name, "header", "expected an object with dtype, shape and data_offsets, found ",
            t.type_name());
  }
  entry e;
  e.name = name;
  const std::uint64_t needed = dtype_and_shape(t, e, path);
  const json& o = field_of(t, "data_offsets", name, path);
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  if (!o.is_array() || o.size() != 2 || !detail::as_count(o[0], begin) ||
      !detail::as_count(o[1], end)) {
    corrupt(path, name, "data_offsets", detail::shown(o.dump()),
            "; expected [begin, end], two non-negative integers");
  }
  const std::uint64_t data_bytes = file_size - data_start;
  if (begin > end) corrupt(path, name, "data_offsets", "[", begin, ", ", end, "]: begin > end");
  if (end > data_bytes) {
    corrupt(path, name, "data_offsets", "[", begin, ", ", end, "] runs past the end of the file (",
            data_bytes, " bytes of data follow the header)");
  }
  if (end - begin != needed) {
    corrupt(path, name, "data_offsets", "[", begin, ", ", end, "] spans ", end - begin,
            " bytes, but ", e.dtype, " ", detail::shape_text(e.shape), " takes ", needed, " bytes");
  }
  e.begin = data_start + begin;
  e.end = data_start + end;
  e.bytes = static_cast<std::size_t>(end - begin);
  return e;
}

// Sorted by offset, the tensors must cover the data exactly: no gap, no overlap, nothing after.
void check_tiling(std::vector<entry>& ts, std::uint64_t data_start, std::uint64_t file_size,
                  const std::string& path) {
  std::sort(ts.begin(), ts.end(), [](const entry& a, const entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t at = data_start;
  const entry* prev = nullptr;
  for (const entry& e : ts) {
    const std::uint64_t b = e.begin - data_start;
    if (e.begin < at) {
      corrupt(path, e.name, "data_offsets", "starting at ", b, ", it overlaps tensor '", prev->name,
              "' [", prev->begin - data_start, ", ", at - data_start,
              "]; each tensor must start where the previous one ends");
    }
    if (e.begin > at) {
      corrupt(path, e.name, "data_offsets", "starting at ", b, ", it leaves a gap of ",
              e.begin - at, " bytes after ",
              prev ? "tensor '" + prev->name + "'" : std::string("the start of the data"),
              "; each tensor must start where the previous one ends");
    }
    at = e.end;
    prev = &e;
  }
  if (at == file_size) return;
  if (prev == nullptr) {
    corrupt(path, "", "header", "no tensor, yet ", file_size - data_start,
            " bytes follow the header; the file must end where the header does");
  }
  corrupt(path, prev->name, "data_offsets", "the last tensor ends at ", at - data_start, ", but ",
          file_size - data_start,
          " bytes of data follow the header; the tensors must cover them to the end of the file");
}

}  // namespace

const entry* header::find(std::string_view name) const noexcept {
  for (const entry& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::size_t dtype_bits(std::string_view dtype) noexcept {
  for (const known_dtype& d : k_dtypes) {
    if (d.name == dtype) return d.bits;
  }
  return 0;
}

std::uint64_t header_length(const std::uint8_t* first8, std::uint64_t file_size,
                            const std::string& path) {
  if (file_size < 8) {
    corrupt(path, "", "header length", "the file has ", file_size,
            " bytes, fewer than the 8 of the header's length");
  }
  const std::uint64_t n = detail::load_u64(first8);
  if (n > max_header_bytes) {
    corrupt(path, "", "header length", n, " bytes is over the limit of ", max_header_bytes);
  }
  if (n > file_size - 8) {
    corrupt(path, "", "header length", "a header of ", n, " bytes does not fit in the file of ",
            file_size, " bytes");
  }
  return n;
}

header parse_header(std::string_view text, std::uint64_t file_size, const std::string& path) {
  header h;
  h.data_start = 8 + std::uint64_t{text.size()};
  h.file_size = file_size;
  if (h.data_start > file_size) {
    corrupt(path, "", "header length", "a header of ", text.size(),
            " bytes does not fit in the file of ", file_size, " bytes");
  }
  const json j = parse_object(text, path);
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      h.metadata = metadata_of(value, path);
    } else {
      h.tensors.push_back(entry_of(name, value, h.data_start, file_size, path));
    }
  }
  check_tiling(h.tensors, h.data_start, file_size, path);
  return h;
}

header read_header(const std::string& path) {
  const detail::header_file f(path, "safetensors file");
  std::uint8_t first8[8] = {};
  if (f.size() >= 8) f.read(first8, 8, 0);
  const std::uint64_t n = header_length(first8, f.size(), path);
  std::string text(static_cast<std::size_t>(n), '\0');
  f.read(text.data(), text.size(), 8);
  return parse_header(text, f.size(), path);
}

}  // namespace htp::safetensors
