// The safetensors header reader (htp/safetensors.hpp): a valid file read back entry by entry, and
// each rule of the format broken by a handmade file, which must be an htp::corrupt_data naming the
// tensor and the field (or an htp::io_error naming the path for a file that is not there).
#include "throws_naming.hpp"

#include <htp/safetensors.hpp>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace htp::test {
namespace {

using safetensors::read_header;

struct temp_path {
  std::string path;
  temp_path() {
    char name[] = "/tmp/htp-safetensors-test-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path = name;
  }
  ~temp_path() { std::remove(path.c_str()); }
};

/// Writes a file: the 8-byte length of `header` (or `length` when given), `header`, then
/// `data_bytes` bytes of data.
void write_file(const std::string& path, const std::string& header, std::size_t data_bytes,
                std::uint64_t length = UINT64_MAX) {
  const std::uint64_t n = length == UINT64_MAX ? header.size() : length;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int k = 0; k < 8; ++k) out.put(static_cast<char>(n >> (8 * k)));
  out << header << std::string(data_bytes, '\x5a');
}

/// `header` written with `data_bytes` of data must be refused naming every needle.
::testing::AssertionResult refused(const std::string& header, std::size_t data_bytes,
                                   std::initializer_list<const char*> needles) {
  temp_path f;
  write_file(f.path, header, data_bytes);
  return throws_naming<corrupt_data>([&] { (void)read_header(f.path); }, needles);
}

// An F32 [64, 32] tensor "w" (8192 bytes) then an I64 [4] tensor "b" (32 bytes).
const char* const k_two = R"({"w":{"dtype":"F32","shape":[64,32],"data_offsets":[0,8192]},)"
                          R"("b":{"dtype":"I64","shape":[4],"data_offsets":[8192,8224]}})";

TEST(safetensors_header, a_valid_file_with_metadata_reads_back_in_file_order) {
  const std::string header =
      R"({"__metadata__":{"format":"pt","note":"x"},"b":{"dtype":"I64","shape":[4],)"
      R"("data_offsets":[8192,8224]},"w":{"dtype":"F32","shape":[64,32],"data_offsets":[0,8192]},)"
      R"("e":{"dtype":"BF16","shape":[0,3],"data_offsets":[8224,8224]},)"
      R"("s":{"dtype":"U8","shape":[],"data_offsets":[8224,8225]}}  )";
  temp_path f;
  write_file(f.path, header, 8225);
  const safetensors::header h = read_header(f.path);
  EXPECT_EQ(h.data_start, 8 + header.size());
  EXPECT_EQ(h.file_size, 8 + header.size() + 8225);
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}}));
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.tensors[0].name, "w");
  EXPECT_EQ(h.tensors[0].dtype, "F32");
  EXPECT_EQ(h.tensors[0].shape, (std::vector<std::int64_t>{64, 32}));
  EXPECT_EQ(h.tensors[0].begin, h.data_start);
  EXPECT_EQ(h.tensors[0].bytes, 8192u);
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].end, h.data_start + 8224);
  EXPECT_EQ(h.tensors[2].name, "e");
  EXPECT_EQ(h.tensors[2].bytes, 0u);
  EXPECT_EQ(h.tensors[3].name, "s");
  EXPECT_EQ(h.tensors[3].shape, std::vector<std::int64_t>{});
  EXPECT_EQ(h.tensors[3].end, h.file_size);
  ASSERT_NE(h.find("b"), nullptr);
  EXPECT_EQ(h.find("b")->dtype, "I64");
  EXPECT_EQ(h.find("__metadata__"), nullptr);
}

TEST(safetensors_header, dtype_sizes_are_the_formats) {
  EXPECT_EQ(safetensors::dtype_bits("BF16"), 16u);
  EXPECT_EQ(safetensors::dtype_bits("F8_E4M3"), 8u);
  EXPECT_EQ(safetensors::dtype_bits("C64"), 64u);
  EXPECT_EQ(safetensors::dtype_bits("F4"), 4u);
  EXPECT_EQ(safetensors::dtype_bits("bf16"), 0u);
  EXPECT_EQ(safetensors::dtype_bits(""), 0u);
}

TEST(safetensors_header, a_span_shorter_than_the_shape_is_refused) {
  EXPECT_TRUE(refused(R"({"w":{"dtype":"F32","shape":[64,32],"data_offsets":[0,16]}})", 16,
                      {"tensor 'w'", "\"data_offsets\"", "spans 16 bytes", "takes 8192 bytes"}));
}

TEST(safetensors_header, reversed_offsets_are_refused) {
  EXPECT_TRUE(refused(R"({"w":{"dtype":"U8","shape":[16],"data_offsets":[16,0]}})", 16,
                      {"tensor 'w'", "\"data_offsets\"", "begin > end"}));
}

TEST(safetensors_header, a_negative_offset_is_refused) {
  EXPECT_TRUE(refused(R"({"w":{"dtype":"U8","shape":[24],"data_offsets":[-8,16]}})", 16,
                      {"tensor 'w'", "\"data_offsets\"", "non-negative"}));
}

TEST(safetensors_header, overlapping_tensors_are_refused) {
  EXPECT_TRUE(refused(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                      R"("b":{"dtype":"U8","shape":[16],"data_offsets":[8,24]}})",
                      24, {"tensor 'b'", "\"data_offsets\"", "overlaps tensor 'a'"}));
}

TEST(safetensors_header, a_gap_between_tensors_is_refused) {
  EXPECT_TRUE(refused(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                      R"("b":{"dtype":"U8","shape":[16],"data_offsets":[24,40]}})",
                      40, {"tensor 'b'", "\"data_offsets\"", "gap of 8 bytes after tensor 'a'"}));
  EXPECT_TRUE(refused(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[4,20]}})", 20,
                      {"tensor 'a'", "\"data_offsets\"", "gap of 4 bytes"}));
}

TEST(safetensors_header, data_the_tensors_do_not_cover_is_refused) {
  EXPECT_TRUE(refused(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})", 20,
                      {"tensor 'a'", "\"data_offsets\"", "ends at 16", "20 bytes of data"}));
  EXPECT_TRUE(refused(R"({"__metadata__":{}})", 4, {"\"header\"", "no tensor"}));
}

TEST(safetensors_header, a_tensor_past_the_end_of_the_file_is_refused) {
  EXPECT_TRUE(
      refused(k_two, 8200, {"tensor 'b'", "\"data_offsets\"", "past the end of the file", "8200"}));
}

TEST(safetensors_header, an_unknown_or_missing_dtype_is_refused) {
  EXPECT_TRUE(refused(R"({"w":{"dtype":"F31","shape":[4],"data_offsets":[0,16]}})", 16,
                      {"tensor 'w'", "\"dtype\"", "'F31' is not a safetensors dtype"}));
  EXPECT_TRUE(refused(R"({"w":{"dtype":32,"shape":[4],"data_offsets":[0,16]}})", 16,
                      {"tensor 'w'", "\"dtype\"", "expected a string"}));
  EXPECT_TRUE(refused(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", 16,
                      {"tensor 'w'", "\"dtype\"", "missing"}));
}

TEST(safetensors_header, a_bad_shape_is_refused) {
  EXPECT_TRUE(refused(R"({"w":{"dtype":"U8","shape":[4,-4],"data_offsets":[0,16]}})", 16,
                      {"tensor 'w'", "\"shape\"", "dimension 1 is -4"}));
  EXPECT_TRUE(refused(R"({"w":{"dtype":"U8","shape":[4,"4"],"data_offsets":[0,16]}})", 16,
                      {"tensor 'w'", "\"shape\"", "dimension 1"}));
  EXPECT_TRUE(refused(R"({"w":{"dtype":"U8","shape":16,"data_offsets":[0,16]}})", 16,
                      {"tensor 'w'", "\"shape\"", "expected an array"}));
  EXPECT_TRUE(refused(R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2,
                      {"tensor 'w'", "\"shape\"", "not a whole number of bytes"}));
  EXPECT_TRUE(refused(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],)"
                      R"("data_offsets":[0,16]}})",
                      16, {"tensor 'w'", "\"shape\"", "more bytes than any file holds"}));
}

TEST(safetensors_header, a_name_given_twice_is_refused) {
  EXPECT_TRUE(refused(R"({"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                      R"("w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})",
                      16, {"tensor 'w'", "twice"}));
}

TEST(safetensors_header, bad_metadata_is_refused) {
  EXPECT_TRUE(refused(R"({"__metadata__":{"n":1}})", 0, {"\"__metadata__\"", "'n'", "string"}));
  EXPECT_TRUE(refused(R"({"__metadata__":[]})", 0, {"\"__metadata__\"", "expected an object"}));
}

TEST(safetensors_header, a_file_of_four_bytes_is_refused) {
  temp_path f;
  {
    std::ofstream out(f.path, std::ios::binary | std::ios::trunc);
    out << "abcd";
  }
  EXPECT_TRUE(throws_naming<corrupt_data>([&] { (void)read_header(f.path); },
                                          {f.path.c_str(), "\"header length\"", "4 bytes"}));
}

TEST(safetensors_header, a_truncated_header_is_refused) {
  temp_path f;
  write_file(f.path, std::string(k_two).substr(0, 40), 0, 200);  // claims 200 bytes, holds 40
  EXPECT_TRUE(throws_naming<corrupt_data>([&] { (void)read_header(f.path); },
                                          {"\"header length\"", "200 bytes does not fit"}));
  write_file(f.path, std::string(k_two).substr(0, 40), 0);  // the JSON itself ends early
  EXPECT_TRUE(throws_naming<corrupt_data>([&] { (void)read_header(f.path); },
                                          {f.path.c_str(), "\"header\"", "not valid JSON"}));
  write_file(f.path, "{}", 0, std::uint64_t{1} << 40);
  EXPECT_TRUE(throws_naming<corrupt_data>([&] { (void)read_header(f.path); },
                                          {"\"header length\"", "over the limit"}));
}

TEST(safetensors_header, a_header_that_is_not_a_json_object_is_refused) {
  EXPECT_TRUE(refused("not json at all", 0, {"\"header\"", "starting with '{'"}));
  EXPECT_TRUE(refused(R"({"w": nope})", 0, {"\"header\"", "not valid JSON"}));
  EXPECT_TRUE(refused(R"({"w":[1,2]})", 0, {"tensor 'w'", "expected an object"}));
  EXPECT_TRUE(refused("", 0, {"\"header\"", "found nothing"}));
}

TEST(safetensors_header, a_missing_file_is_an_io_error_naming_the_path) {
  const std::string path = "/nonexistent-dir/model.safetensors";
  try {
    (void)read_header(path);
    ADD_FAILURE() << "a missing file was read";
  } catch (const io_error& e) {
    EXPECT_EQ(e.path(), path);
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(safetensors_header, parse_header_checks_text_given_in_memory) {
  const std::string text = R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})";
  const auto h = safetensors::parse_header(text, 8 + text.size() + 8, "mem");
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].begin, 8 + text.size());
  EXPECT_TRUE(throws_naming<corrupt_data>(
      [&] { (void)safetensors::parse_header(text, 8 + text.size() + 9, "mem"); },
      {"'mem'", "tensor 'a'", "ends at 8"}));
  const std::uint8_t len[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_TRUE(throws_naming<corrupt_data>(
      [&] { (void)safetensors::header_length(len, 100, "mem"); }, {"\"header length\""}));
}

}  // namespace
}  // namespace htp::test
