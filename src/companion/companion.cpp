// Compressed companions: the writer, the index reader and registration (companion.hpp).
#include <htp/companion.hpp>

#include <htp/codec.hpp>
#include <htp/detail/check.hpp>
#include <htp/error.hpp>
#include <htp/safetensors.hpp>

#include "header_io.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string_view>
#include <utility>

namespace htp::companion {

namespace {

constexpr std::string_view k_tag = "\"htp-companion\"";

bool format_of(const std::string& dtype, weight_format& f) {
  if (dtype == "BF16")
    f = weight_format::bf16;
  else if (dtype == "F16")
    f = weight_format::fp16;
  else if (dtype == "F32")
    f = weight_format::fp32;
  else
    return false;
  return true;
}

// The sequences of a safetensors file's compressible tensors, in file order, and their entries.
struct encoded {
  index idx;
  std::vector<std::string> order;
  std::vector<std::vector<std::uint8_t>> sequences;
};

encoded encode_file(const std::string& in, std::size_t chunk_bytes, unsigned threads) {
  std::vector<std::uint8_t> file;
  {
    const detail::header_file f(in, "safetensors file");
    file.resize(static_cast<std::size_t>(f.size()));
    f.read(file.data(), file.size(), 0);
  }
  const std::uint64_t n = safetensors::header_length(file.data(), file.size(), in);
  const safetensors::header header = safetensors::parse_header(
      std::string_view(reinterpret_cast<const char*>(file.data()) + 8, n), file.size(), in);
  encoded r;
  r.idx.chunk_bytes = chunk_bytes;
  for (const safetensors::entry& t : header.tensors) {
    weight_format f{};
    if (!format_of(t.dtype, f) || t.bytes == 0) {
      r.idx.skipped.push_back(t.name);
      continue;
    }
    codec_options o;
    o.chunk_bytes = chunk_bytes;
    o.threads = threads;
    const auto frame = encode_weights(file.data() + t.begin, t.bytes, f, o);
    r.sequences.push_back(split_frame(parse_frame(frame.data(), frame.size())));
    entry e;
    e.dtype = t.dtype;
    e.shape = t.shape;
    e.bytes = t.bytes;
    e.wire_bytes = r.sequences.back().size();
    r.idx.tensors[t.name] = e;
    r.order.push_back(t.name);
  }
  return r;
}

// The index's JSON, padded with spaces to a length that fixes the offsets: they depend on the
// index's length, which depends on the offsets' digits.
std::string index_text(const std::string& in, encoded& r) {
  for (std::size_t pad = 0;;) {
    std::uint64_t at = 8 + pad;
    for (const auto& name : r.order) {
      r.idx.tensors[name].offset = at;
      at += r.idx.tensors[name].wire_bytes;
    }
    nlohmann::json j = {{"format", "htp-companion"},
                        {"version", 1},
                        {"chunk_bytes", r.idx.chunk_bytes},
                        {"source", in},
                        {"skipped", r.idx.skipped}};
    for (const auto& [name, e] : r.idx.tensors) {
      j["tensors"][name] = {{"dtype", e.dtype},
                            {"shape", e.shape},
                            {"bytes", e.bytes},
                            {"offset", e.offset},
                            {"wire_bytes", e.wire_bytes}};
    }
    std::string text = j.dump();
    if (text.size() <= pad) {
      text.resize(pad, ' ');
      return text;
    }
    pad = text.size() + 16;
  }
}

// A broken rule of a real companion's index (one that names itself "htp-companion").
template <typename... Parts>
[[noreturn]] void corrupt_index(const std::string& path, std::string_view tensor,
                                std::string_view field, const Parts&... what) {
  std::string where = tensor.empty() ? std::string() : detail::concat("tensor '", tensor, "', ");
  throw corrupt_data(detail::concat("companion '", path, "': ", where, "\"", field,
                                    "\": ", detail::concat(what...),
                                    " (the index is corrupt: write the companion again with "
                                    "htp-compress or htp.write_companion)"));
}

// A file that does not name itself a companion at all.
[[noreturn]] void not_a_companion(const std::string& path, const std::string& why) {
  throw invalid_argument(
      detail::concat("'", path, "' is not a companion (", why,
                     "); give a file htp-compress or htp.write_companion wrote"));
}

std::uint64_t count_field(const nlohmann::json& t, const char* field, std::string_view name,
                          const std::string& path) {
  const auto it = t.find(field);
  if (it == t.end()) corrupt_index(path, name, field, "missing");
  std::uint64_t v = 0;
  if (!detail::as_count(*it, v)) {
    corrupt_index(path, name, field, detail::shown(it->dump()),
                  "; expected a non-negative integer");
  }
  return v;
}

std::size_t element_bits(const std::string& dtype) {
  weight_format f{};
  return format_of(dtype, f) ? (dtype == "F32" ? 32 : 16) : 0;
}

// One entry of the index: a compressible dtype, a shape whose elements make `bytes`, and a
// non-empty sequence between the end of the index and the end of the file.
entry index_entry(const std::string& name, const nlohmann::json& t, std::uint64_t index_end,
                  std::uint64_t size, const std::string& path) {
  if (!t.is_object())
    corrupt_index(path, name, "tensors", "expected an object, found ", t.type_name());
  entry e;
  const auto d = t.find("dtype");
  if (d == t.end() || !d->is_string() || element_bits(d->get<std::string>()) == 0) {
    corrupt_index(path, name, "dtype", d == t.end() ? "missing" : detail::shown(d->dump()),
                  "; expected \"BF16\", \"F16\" or \"F32\"");
  }
  e.dtype = d->get<std::string>();
  const auto s = t.find("shape");
  std::size_t bad = 0;
  if (s == t.end() || !detail::as_shape(*s, e.shape, bad)) {
    corrupt_index(path, name, "shape", s == t.end() ? "missing" : detail::shown(s->dump()),
                  "; expected an array of non-negative integers");
  }
  const std::uint64_t bytes = count_field(t, "bytes", name, path);
  std::uint64_t bits = 0;
  if (!detail::shape_bits(e.shape, element_bits(e.dtype), bits)) {
    corrupt_index(path, name, "shape", detail::shape_text(e.shape), " of ", e.dtype,
                  " is more bytes than any file holds");
  }
  if (bits / 8 != bytes || bytes == 0) {
    corrupt_index(path, name, "bytes", bytes, "; ", e.dtype, " ", detail::shape_text(e.shape),
                  " takes ", bits / 8,
                  " bytes, and never 0 (an empty tensor is listed as skipped)");
  }
  e.bytes = static_cast<std::size_t>(bytes);
  e.offset = count_field(t, "offset", name, path);
  e.wire_bytes = static_cast<std::size_t>(count_field(t, "wire_bytes", name, path));
  if (e.offset < index_end || e.offset >= size) {
    corrupt_index(path, name, "offset", e.offset, " is outside the sequences, bytes [", index_end,
                  ", ", size, ") of the file");
  }
  if (e.wire_bytes == 0 || e.wire_bytes > size - e.offset) {
    corrupt_index(path, name, "wire_bytes", e.wire_bytes, " bytes at ", e.offset,
                  e.wire_bytes == 0 ? " is empty" : " run past the end of the file", " (", size,
                  " bytes)");
  }
  return e;
}

// Sorted by offset, no sequence may start inside the one before it.
void check_no_overlap(const index& idx, const std::string& path) {
  std::vector<std::pair<std::uint64_t, const std::string*>> starts;
  for (const auto& [name, e] : idx.tensors) starts.emplace_back(e.offset, &name);
  std::sort(starts.begin(), starts.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < starts.size(); ++i) {
    const entry& prev = idx.tensors.at(*starts[i - 1].second);
    if (prev.offset + prev.wire_bytes > starts[i].first) {
      corrupt_index(path, *starts[i].second, "offset", starts[i].first, " lies inside tensor '",
                    *starts[i - 1].second, "' [", prev.offset, ", ", prev.offset + prev.wire_bytes,
                    "); sequences may not overlap");
    }
  }
}

index index_of(const nlohmann::json& j, const std::string& path, std::uint64_t index_end,
               std::uint64_t size) {
  index idx;
  idx.chunk_bytes = static_cast<std::size_t>(count_field(j, "chunk_bytes", "", path));
  if (idx.chunk_bytes == 0) corrupt_index(path, "", "chunk_bytes", "0; expected the codec chunk");
  const auto skipped = j.find("skipped");
  if (skipped == j.end() || !skipped->is_array()) {
    corrupt_index(path, "", "skipped", "expected an array of names");
  }
  for (const auto& name : *skipped) {
    if (!name.is_string())
      corrupt_index(path, "", "skipped", detail::shown(name.dump()), " is not a name");
    idx.skipped.push_back(name.get<std::string>());
  }
  const auto tensors = j.find("tensors");
  if (tensors != j.end() && !tensors->is_object()) {
    corrupt_index(path, "", "tensors", "expected an object, found ", tensors->type_name());
  }
  if (tensors != j.end()) {
    for (const auto& [name, t] : tensors->items()) {
      idx.tensors[name] = index_entry(name, t, index_end, size, path);
    }
  }
  check_no_overlap(idx, path);
  return idx;
}

// The index's JSON: a file that does not name itself "htp-companion" is not a companion
// (invalid_argument); one that does but is not valid JSON is a corrupt one.
nlohmann::json parse_index(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    if (text.find(k_tag) == std::string::npos) {
      not_a_companion(path, detail::concat("its index is not JSON: ", e.what()));
    }
    corrupt_index(path, "", "index", "not valid JSON: ", e.what());
  }
  const auto format = j.is_object() ? j.find("format") : j.end();
  if (!j.is_object() || format == j.end() || *format != "htp-companion") {
    not_a_companion(path, "its index lacks format \"htp-companion\"");
  }
  const auto version = j.find("version");
  if (version == j.end() || *version != 1) {
    not_a_companion(path,
                    detail::concat("its index has version ",
                                   version == j.end() ? "none" : detail::shown(version->dump()),
                                   "; this htp reads version 1"));
  }
  return j;
}

}  // namespace

std::size_t codec_chunk_for(std::size_t pager_chunk_bytes) noexcept {
  return pager_chunk_bytes > 56 ? std::min<std::size_t>((pager_chunk_bytes - 56) / 4 * 4, 1u << 30)
                                : 0;
}

index write(const std::string& in, const std::string& out, std::size_t chunk_bytes,
            unsigned threads) {
  encoded r = encode_file(in, chunk_bytes, threads);
  std::string text;
  try {
    text = index_text(in, r);
  } catch (const nlohmann::json::exception& e) {  // a path that is not UTF-8
    throw invalid_argument(
        detail::concat("'", in, "': the companion's index cannot hold its path: ", e.what()));
  }
  std::ofstream o(out, std::ios::binary | std::ios::trunc);
  if (!o.good()) throw io_error(detail::concat("cannot create the companion '", out, "'"), out);
  std::uint8_t len[8];
  for (int k = 0; k < 8; ++k)
    len[k] = static_cast<std::uint8_t>(std::uint64_t{text.size()} >> (8 * k));
  o.write(reinterpret_cast<const char*>(len), 8);
  o.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& s : r.sequences)
    o.write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size()));
  o.flush();
  if (!o.good()) throw io_error(detail::concat("writing the companion '", out, "' failed"), out);
  return std::move(r.idx);
}

index read_index(const std::string& path) {
  const detail::header_file f(path, "companion");
  const std::uint64_t size = f.size();
  std::uint8_t len[8] = {};
  if (size >= 8) f.read(len, 8, 0);
  const std::uint64_t n = detail::load_u64(len);
  if (size < 8 || n > size - 8 || n > safetensors::max_header_bytes) {
    std::string head(
        static_cast<std::size_t>(size > 8 ? std::min<std::uint64_t>(size - 8, 4096) : 0), '\0');
    f.read(head.data(), head.size(), 8);
    if (head.find(k_tag) == std::string::npos) {
      not_a_companion(path, detail::concat("an index of ", n, " bytes in a file of ", size));
    }
    corrupt_index(path, "", "index length", "an index of ", n,
                  " bytes does not fit in the file of ", size,
                  " bytes: the companion is truncated");
  }
  std::string text(static_cast<std::size_t>(n), '\0');
  f.read(text.data(), text.size(), 8);
  return index_of(parse_index(text, path), path, 8 + n, size);
}

std::map<std::string, tensor_handle> register_companion(pager& p, const std::string& path,
                                                        const std::vector<std::string>& names) {
  return register_companion(p, path, read_index(path), names);
}

std::map<std::string, tensor_handle> register_companion(pager& p, const std::string& path,
                                                        const index& idx,
                                                        const std::vector<std::string>& names) {
  std::vector<std::string> wanted = names;
  if (wanted.empty()) {
    for (const auto& [name, e] : idx.tensors) wanted.push_back(name);
  }
  std::vector<std::string> sorted = wanted;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  HTP_EXPECTS(twice == sorted.end(), invalid_argument, "register_companion: '", *twice,
              "' is named twice");
  for (const auto& name : wanted) {
    const bool skipped =
        std::find(idx.skipped.begin(), idx.skipped.end(), name) != idx.skipped.end();
    HTP_EXPECTS(idx.tensors.count(name) != 0, invalid_argument, "companion '", path,
                "' holds no tensor '", name, "'",
                skipped ? " (it was skipped: not BF16, F16 or F32, or empty; register it from the "
                          "safetensors file)"
                        : "");
  }
  const auto file = tensor_file::open(path);
  std::map<std::string, tensor_handle> out;
  try {
    for (const auto& name : wanted) {
      const entry& e = idx.tensors.at(name);
      out.emplace(name, p.register_compressed_file_tensor(name, file, e.offset, e.wire_bytes));
    }
  } catch (...) {
    for (const auto& [name, h] : out) p.unregister_tensor(h);
    throw;
  }
  return out;
}

}  // namespace htp::companion
