// Compressed companions: the writer, the index reader and registration (companion.hpp).
#include <htp/companion.hpp>

#include <htp/codec.hpp>
#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>

namespace htp::companion {

namespace {

std::vector<std::uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HTP_EXPECTS(f.good(), invalid_argument, "cannot open the safetensors file '", path, "'");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::uint64_t load_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = v << 8 | p[k];
  return v;
}

nlohmann::json header_of(const std::vector<std::uint8_t>& file, const std::string& path,
                         std::size_t& data_start) {
  HTP_EXPECTS(file.size() >= 8, invalid_argument, "'", path, "' is shorter than 8 bytes");
  const std::uint64_t n = load_u64(file.data());
  HTP_EXPECTS(n <= file.size() - 8, invalid_argument, "'", path, "': a header of ", n,
              " bytes does not fit in the file");
  data_start = 8 + static_cast<std::size_t>(n);
  try {
    return nlohmann::json::parse(file.begin() + 8, file.begin() + static_cast<long>(data_start));
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument(detail::concat("'", path, "': the header is not JSON: ", e.what()));
  }
}

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
  const std::vector<std::uint8_t> file = read_all(in);
  std::size_t data_start = 0;
  const nlohmann::json header = header_of(file, in, data_start);
  encoded r;
  r.idx.chunk_bytes = chunk_bytes;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string dtype = t.at("dtype").get<std::string>();
    const auto begin = t.at("data_offsets").at(0).get<std::size_t>();
    const auto end = t.at("data_offsets").at(1).get<std::size_t>();
    HTP_EXPECTS(begin <= end && end <= file.size() - data_start, invalid_argument, "'", in,
                "': tensor '", name, "' lies outside the file");
    weight_format f{};
    if (!format_of(dtype, f) || begin == end) {
      r.idx.skipped.push_back(name);
      continue;
    }
    codec_options o;
    o.chunk_bytes = chunk_bytes;
    o.threads = threads;
    const auto frame = encode_weights(file.data() + data_start + begin, end - begin, f, o);
    r.sequences.push_back(split_frame(parse_frame(frame.data(), frame.size())));
    entry e;
    e.dtype = dtype;
    e.shape = t.at("shape").get<std::vector<std::int64_t>>();
    e.bytes = end - begin;
    e.wire_bytes = r.sequences.back().size();
    r.idx.tensors[name] = e;
    r.order.push_back(name);
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

index index_of(const nlohmann::json& j, const std::string& path) {
  HTP_EXPECTS(j.value("format", "") == "htp-companion" && j.value("version", 0) == 1,
              invalid_argument, "'", path,
              "' is not a companion (its index lacks format \"htp-companion\", version 1)");
  index idx;
  idx.chunk_bytes = j.at("chunk_bytes").get<std::size_t>();
  idx.skipped = j.at("skipped").get<std::vector<std::string>>();
  if (j.contains("tensors")) {
    for (const auto& [name, t] : j.at("tensors").items()) {
      entry e;
      e.dtype = t.at("dtype").get<std::string>();
      e.shape = t.at("shape").get<std::vector<std::int64_t>>();
      e.bytes = t.at("bytes").get<std::size_t>();
      e.offset = t.at("offset").get<std::uint64_t>();
      e.wire_bytes = t.at("wire_bytes").get<std::size_t>();
      idx.tensors[name] = e;
    }
  }
  return idx;
}

}  // namespace

std::size_t codec_chunk_for(std::size_t pager_chunk_bytes) noexcept {
  return pager_chunk_bytes > 56 ? std::min<std::size_t>((pager_chunk_bytes - 56) / 4 * 4, 1u << 30)
                                : 0;
}

index write(const std::string& in, const std::string& out, std::size_t chunk_bytes,
            unsigned threads) {
  encoded r;
  std::string text;
  try {
    r = encode_file(in, chunk_bytes, threads);
    text = index_text(in, r);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument(detail::concat("'", in, "' is not a safetensors file: ", e.what()));
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
  std::ifstream f(path, std::ios::binary);
  HTP_EXPECTS(f.good(), invalid_argument, "cannot open the companion '", path, "'");
  f.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(f.tellg());
  f.seekg(0);
  std::uint8_t len[8] = {};
  f.read(reinterpret_cast<char*>(len), 8);
  const std::uint64_t n = load_u64(len);
  HTP_EXPECTS(size >= 8 && n <= size - 8, invalid_argument, "'", path,
              "' is not a companion (an index of ", n, " bytes in a file of ", size, ")");
  std::string text(static_cast<std::size_t>(n), '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  HTP_EXPECTS(f.good(), invalid_argument, "'", path, "' is not a companion (truncated index)");
  try {
    return index_of(nlohmann::json::parse(text), path);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument(
        detail::concat("'", path, "' is not a companion (its index: ", e.what(), ")"));
  }
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
