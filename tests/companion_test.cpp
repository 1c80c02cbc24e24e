// Compressed companions of safetensors files (htp/companion.hpp): written from a tiny safetensors
// file the test makes, indexed, and paged in through the pager bit for bit; register_companion's
// all-or-nothing registration; malformed files as typed errors.
#include "pager_fixture.hpp"
#include "throws_naming.hpp"

#include <htp/tensor_file.hpp>

#include <htp/companion.hpp>

#include "common/synthetic_weights.hpp"

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>

namespace htp::test {
namespace {

struct temp_path {
  std::string path;
  temp_path() {
    char name[] = "/tmp/htp-companion-test-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path = name;
  }
  ~temp_path() { std::remove(path.c_str()); }
};

/// A safetensors file of the given tensors (name, dtype, bytes), data back to back.
void write_safetensors(
    const std::string& path,
    const std::vector<std::tuple<std::string, std::string, std::vector<std::uint8_t>>>& tensors) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::size_t at = 0;
  for (const auto& [name, dtype, bytes] : tensors) {
    const std::size_t elements = bytes.size() / (dtype == "F32" || dtype == "I32" ? 4 : 2);
    header += ",\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" +
              std::to_string(elements) + "],\"data_offsets\":[" + std::to_string(at) + "," +
              std::to_string(at + bytes.size()) + "]}";
    at += bytes.size();
  }
  header += "}";
  std::ofstream out(path, std::ios::binary);
  std::uint8_t len[8];
  for (int k = 0; k < 8; ++k) len[k] = static_cast<std::uint8_t>(header.size() >> (8 * k));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& t : tensors) {
    const auto& bytes = std::get<2>(t);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
}

using companion_test = sim_pager_test;

TEST_F(companion_test, a_safetensors_companion_pages_in_bit_for_bit) {
  const auto a = synthetic::llama_mixture(40'000, weight_format::bf16, 1);
  const auto b = synthetic::llama_mixture(9'000, weight_format::fp16, 2);
  const auto c = synthetic::llama_mixture(5'000, weight_format::fp32, 3);
  const std::vector<std::uint8_t> ids(4'000, 7);
  temp_path src;
  temp_path dst;
  write_safetensors(src.path,
                    {{"a", "BF16", a}, {"b", "F16", b}, {"c", "F32", c}, {"ids", "I32", ids}});
  const pager_config cfg = small_pager_config(4);
  const auto written =
      companion::write(src.path, dst.path, companion::codec_chunk_for(cfg.chunk_bytes));
  const auto idx = companion::read_index(dst.path);
  ASSERT_EQ(idx.tensors.size(), 3u);
  ASSERT_EQ(idx.skipped, std::vector<std::string>{"ids"});
  EXPECT_EQ(idx.chunk_bytes, written.chunk_bytes);
  EXPECT_EQ(idx.tensors.at("a").bytes, a.size());
  EXPECT_EQ(idx.tensors.at("a").dtype, "BF16");
  EXPECT_EQ(idx.tensors.at("b").shape, std::vector<std::int64_t>{9'000});
  EXPECT_LT(idx.tensors.at("a").wire_bytes, a.size());
  pager p(*dev, cfg);
  auto file = tensor_file::open(dst.path);
  const std::map<std::string, const std::vector<std::uint8_t>*> want = {
      {"a", &a}, {"b", &b}, {"c", &c}};
  std::map<std::string, tensor_handle> h;
  for (const auto& [name, e] : idx.tensors) {
    EXPECT_EQ(e.offset, written.tensors.at(name).offset);
    h[name] = p.register_compressed_file_tensor(name, file, e.offset, e.wire_bytes);
  }
  for (int round = 0; round < 2; ++round) {
    for (const auto& [name, w] : want) {
      EXPECT_EQ(device_checksum(p, *dev, h[name], compute, slot), checksum(w->data(), w->size()))
          << name << ", round " << round;
      p.evict(h[name]);
    }
  }
  EXPECT_EQ(p.metrics().compressed_tensors, 3u);
}

TEST_F(companion_test, a_companion_cut_for_larger_chunks_is_refused_saying_how_to_fix_it) {
  const auto a = synthetic::llama_mixture(100'000, weight_format::bf16, 4);
  temp_path src;
  temp_path dst;
  write_safetensors(src.path, {{"a", "BF16", a}});
  const auto idx = companion::write(src.path, dst.path, companion::codec_chunk_for(64 << 10));
  pager p(*dev, small_pager_config(4));  // 16 KiB chunks: the 64 KiB pieces cannot be staged
  const auto& e = idx.tensors.at("a");
  try {
    (void)p.register_compressed_file_tensor("a", tensor_file::open(dst.path), e.offset,
                                            e.wire_bytes);
    ADD_FAILURE() << "a piece larger than a chunk was accepted";
  } catch (const invalid_argument& err) {
    EXPECT_NE(std::string(err.what()).find("htp-compress --pager-chunk-bytes"), std::string::npos)
        << err.what();
  }
  EXPECT_EQ(p.metrics().registered_tensors, 0u);
}

TEST(companion, a_file_that_is_not_safetensors_or_not_a_companion_is_refused) {
  temp_path src;
  {
    std::ofstream out(src.path, std::ios::binary);
    out << "not a safetensors file at all";
  }
  temp_path dst;
  EXPECT_TRUE(
      throws_naming<corrupt_data>([&] { (void)companion::write(src.path, dst.path, 16 << 10); },
                                  {src.path.c_str(), "\"header length\""}));
  EXPECT_TRUE(throws_naming([&] { (void)companion::read_index(src.path); },
                            {src.path.c_str(), "is not a companion"}));
  EXPECT_TRUE(throws_naming<io_error>(
      [&] { (void)companion::write("/nonexistent-dir/m.safetensors", dst.path, 16 << 10); },
      {"/nonexistent-dir/m.safetensors"}));
}

TEST_F(companion_test, register_companion_registers_by_name_all_or_nothing) {
  const auto a = synthetic::llama_mixture(20'000, weight_format::bf16, 5);
  const auto b = synthetic::llama_mixture(20'000, weight_format::bf16, 6);
  temp_path src;
  temp_path dst;
  write_safetensors(src.path, {{"a", "BF16", a}, {"b", "BF16", b}, {"ids", "I32", a}});
  const pager_config cfg = small_pager_config(4);
  const auto idx =
      companion::write(src.path, dst.path, companion::codec_chunk_for(cfg.chunk_bytes));
  pager p(*dev, cfg);
  const auto refused = [&](const std::vector<std::string>& names, const char* says) {
    try {
      (void)companion::register_companion(p, dst.path, names);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.metrics().registered_tensors, 0u) << "nothing left behind";
  };
  refused({"a", "nope"}, "holds no tensor 'nope'");
  refused({"a", "ids"}, "it was skipped");
  refused({"b", "a", "b"}, "'b' is named twice");
  {
    // Corrupt b's sequence: a is registered first, then b's check fails and a is dropped again.
    std::fstream f(dst.path, std::ios::in | std::ios::out | std::ios::binary);
    const auto& e = idx.tensors.at("b");
    f.seekp(static_cast<std::streamoff>(e.offset + e.wire_bytes / 2));
    f.put('\x5a').put('\xa5');
  }
  EXPECT_THROW((void)companion::register_companion(p, dst.path), corrupt_data);
  EXPECT_EQ(p.metrics().registered_tensors, 0u) << "a was unregistered again";
  const auto h = companion::register_companion(p, dst.path, {"a"});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(device_checksum(p, *dev, h.at("a"), compute, slot), checksum(a.data(), a.size()));
}

TEST(companion, an_index_with_missing_fields_is_corrupt_data_not_a_json_error) {
  temp_path path;
  {
    const std::string text = R"({"format":"htp-companion","version":1,"skipped":[]})";
    std::ofstream out(path.path, std::ios::binary);
    std::uint8_t len[8] = {static_cast<std::uint8_t>(text.size())};
    out.write(reinterpret_cast<const char*>(len), 8);
    out << text;
  }
  EXPECT_TRUE(throws_naming<corrupt_data>([&] { (void)companion::read_index(path.path); },
                                          {path.path.c_str(), "\"chunk_bytes\": missing"}));
  temp_path src;
  {
    const std::string text = R"({"w":{"dtype":"BF16","shape":[2]}})";  // no data_offsets
    std::ofstream out(src.path, std::ios::binary);
    std::uint8_t len[8] = {static_cast<std::uint8_t>(text.size())};
    out.write(reinterpret_cast<const char*>(len), 8);
    out << text << "abcd";
  }
  EXPECT_TRUE(
      throws_naming<corrupt_data>([&] { (void)companion::write(src.path, path.path, 16 << 10); },
                                  {"tensor 'w'", "\"data_offsets\": missing"}));
  write_safetensors(src.path, {{"w", "BF16", std::vector<std::uint8_t>(64, 1)}});
  EXPECT_THROW((void)companion::write(src.path, "/nonexistent-dir/x.htpz", 16 << 10), io_error);
}

/// A companion's index text, and the same rewritten (padded with spaces to its length, which must
/// not grow, so that the sequences stay where the offsets say).
std::string index_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::uint8_t len[8] = {};
  f.read(reinterpret_cast<char*>(len), 8);
  std::uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | len[k];
  std::string text(static_cast<std::size_t>(n), '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  return text;
}
void put_index_text(const std::string& path, std::string text, std::size_t length) {
  text.erase(text.find_last_not_of(' ') + 1);  // the writer's padding, put back below
  ASSERT_LE(text.size(), length);
  text.resize(length, ' ');
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from << " in " << text;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(companion, a_damaged_index_is_corrupt_data_naming_the_tensor_and_field) {
  const auto a = synthetic::llama_mixture(40'000, weight_format::bf16, 7);
  const auto b = synthetic::llama_mixture(30'000, weight_format::fp16, 8);
  temp_path src;
  temp_path dst;
  write_safetensors(src.path, {{"a", "BF16", a}, {"b", "F16", b}});
  const auto idx = companion::write(src.path, dst.path, 16 << 10);
  const std::string good = index_text(dst.path);
  const auto& ea = idx.tensors.at("a");
  const auto& eb = idx.tensors.at("b");
  const auto offset_a = "\"offset\":" + std::to_string(ea.offset);
  const auto offset_b = "\"offset\":" + std::to_string(eb.offset);
  const auto wire_a = "\"wire_bytes\":" + std::to_string(ea.wire_bytes);
  const struct {
    std::string from, to;
    std::initializer_list<const char*> needles;
  } cases[] = {
      {"\"dtype\":\"BF16\"", "\"dtype\":\"I32\"", {"tensor 'a'", "\"dtype\"", "\"I32\""}},
      {"\"bytes\":80000", "\"bytes\":80002", {"tensor 'a'", "\"bytes\": 80002", "takes 80000"}},
      {"\"bytes\":80000",
       "\"bytes\":\"8000\"",
       {"tensor 'a'", "\"bytes\"", "non-negative integer"}},
      {"\"shape\":[40000]", "\"shape\":[-1]", {"tensor 'a'", "\"shape\""}},
      {offset_a, "\"offset\":8", {"tensor 'a'", "\"offset\": 8 is outside"}},
      {wire_a,
       "\"wire_bytes\":" + std::string(std::to_string(ea.wire_bytes).size() + 1, '9'),
       {"tensor 'a'", "\"wire_bytes\"", "past the end of the file"}},
      {offset_b,
       "\"offset\":" + std::to_string(ea.offset + 1),
       {"tensor 'b'", "inside tensor 'a'"}},
      {"\"chunk_bytes\":", "\"chunk_bytes\":-", {"\"chunk_bytes\""}},
      {"\"skipped\":[]", "\"skipped\":[1]", {"\"skipped\""}},
      {"{\"chunk_bytes\"", "[\"chunk_bytes\"", {"\"index\"", "not valid JSON"}},
  };
  for (const auto& c : cases) {
    put_index_text(dst.path, replaced(good, c.from, c.to), good.size());
    EXPECT_TRUE(
        throws_naming<corrupt_data>([&] { (void)companion::read_index(dst.path); }, c.needles))
        << c.to;
  }
  put_index_text(dst.path, replaced(good, "\"version\":1", "\"version\":2"), good.size());
  EXPECT_TRUE(throws_naming([&] { (void)companion::read_index(dst.path); },
                            {"is not a companion", "version 2"}));
  put_index_text(dst.path, good, good.size());
  EXPECT_EQ(companion::read_index(dst.path).tensors.size(), 2u);
  ASSERT_EQ(truncate(dst.path.c_str(), static_cast<off_t>(8 + good.size() / 2)), 0);
  EXPECT_TRUE(throws_naming<corrupt_data>([&] { (void)companion::read_index(dst.path); },
                                          {dst.path.c_str(), "\"index length\"", "truncated"}));
  EXPECT_TRUE(throws_naming<io_error>([&] { (void)companion::read_index("/nonexistent/x.htpz"); },
                                      {"/nonexistent/x.htpz"}));
}

}  // namespace
}  // namespace htp::test
