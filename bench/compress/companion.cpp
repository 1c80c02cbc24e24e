// htp-compress's companion writer and index reader (companion.hpp).
#include "compress/companion.hpp"

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
  HTP_EXPECTS(f.good(), invalid_argument, "htp-compress: cannot open '", path, "'");
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

}  // namespace

std::size_t codec_chunk_for(std::size_t pager_chunk_bytes) noexcept {
  return pager_chunk_bytes > 56 ? std::min<std::size_t>((pager_chunk_bytes - 56) / 4 * 4, 1u << 30)
                                : 0;
}

index write(const std::string& in, const std::string& out, std::size_t chunk_bytes,
            unsigned threads) {
  const std::vector<std::uint8_t> file = read_all(in);
  std::size_t data_start = 0;
  const nlohmann::json header = header_of(file, in, data_start);
  index idx;
  idx.chunk_bytes = chunk_bytes;
  std::vector<std::vector<std::uint8_t>> sequences;
  std::vector<std::string> order;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string dtype = t.at("dtype").get<std::string>();
    weight_format f{};
    if (!format_of(dtype, f)) {
      idx.skipped.push_back(name);
      continue;
    }
    const auto begin = t.at("data_offsets").at(0).get<std::size_t>();
    const auto end = t.at("data_offsets").at(1).get<std::size_t>();
    HTP_EXPECTS(begin <= end && data_start + end <= file.size(), invalid_argument, "'", in,
                "': tensor '", name, "' lies outside the file");
    if (begin == end) {
      idx.skipped.push_back(name);
      continue;
    }
    codec_options o;
    o.chunk_bytes = chunk_bytes;
    o.threads = threads;
    const auto frame = encode_weights(file.data() + data_start + begin, end - begin, f, o);
    sequences.push_back(split_frame(parse_frame(frame.data(), frame.size())));
    entry e;
    e.dtype = dtype;
    e.shape = t.at("shape").get<std::vector<std::int64_t>>();
    e.bytes = end - begin;
    e.wire_bytes = sequences.back().size();
    idx.tensors[name] = e;
    order.push_back(name);
  }
  // Offsets depend on the index's length, which depends on the offsets' digits: fix the length by
  // padding the JSON with spaces to a size that no longer changes.
  std::string text;
  for (std::size_t pad = 0;;) {
    std::uint64_t at = 8 + pad;
    for (const auto& name : order) {
      idx.tensors[name].offset = at;
      at += idx.tensors[name].wire_bytes;
    }
    nlohmann::json j = {{"format", "htp-companion"},
                        {"version", 1},
                        {"chunk_bytes", chunk_bytes},
                        {"source", in},
                        {"skipped", idx.skipped}};
    for (const auto& [name, e] : idx.tensors) {
      j["tensors"][name] = {{"dtype", e.dtype},
                            {"shape", e.shape},
                            {"bytes", e.bytes},
                            {"offset", e.offset},
                            {"wire_bytes", e.wire_bytes}};
    }
    text = j.dump();
    if (text.size() <= pad) {
      text.resize(pad, ' ');
      break;
    }
    pad = text.size() + 16;
  }
  std::ofstream o(out, std::ios::binary | std::ios::trunc);
  HTP_EXPECTS(o.good(), invalid_argument, "htp-compress: cannot create '", out, "'");
  std::uint8_t len[8];
  for (int k = 0; k < 8; ++k)
    len[k] = static_cast<std::uint8_t>(std::uint64_t{text.size()} >> (8 * k));
  o.write(reinterpret_cast<const char*>(len), 8);
  o.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& s : sequences)
    o.write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size()));
  o.flush();
  if (!o.good()) throw io_error(detail::concat("htp-compress: writing '", out, "' failed"), out);
  return idx;
}

index read_index(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HTP_EXPECTS(f.good(), invalid_argument, "cannot open companion '", path, "'");
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
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw invalid_argument(detail::concat("'", path, "': the index is not JSON: ", e.what()));
  }
  HTP_EXPECTS(j.value("format", "") == "htp-companion" && j.value("version", 0) == 1,
              invalid_argument, "'", path, "' is not an htp companion (format, version 1)");
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

}  // namespace htp::companion
