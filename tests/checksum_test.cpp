#include <htp/checksum.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace htp::test {
namespace {

TEST(checksum, detects_a_flipped_bit_a_swap_and_a_length_change) {
  std::vector<unsigned char> a(1000);
  fill_pattern(a.data(), a.size(), 42);
  const auto base = checksum(a.data(), a.size());
  auto b = a;
  b[517] ^= 0x10;
  EXPECT_NE(checksum(b.data(), b.size()), base);
  auto c = a;
  std::swap_ranges(c.begin(), c.begin() + 8, c.begin() + 8);  // swap two words
  EXPECT_NE(checksum(c.data(), c.size()), base);
  EXPECT_NE(checksum(a.data(), a.size() - 1), base);
  EXPECT_EQ(checksum(a.data(), a.size()), base);
}

TEST(checksum, zero_filled_buffers_of_different_length_differ) {
  std::vector<unsigned char> z(64, 0);
  EXPECT_NE(checksum(z.data(), 64), checksum(z.data(), 56));
}

TEST(fill_pattern, depends_on_seed_and_is_a_prefix_of_longer_fills) {
  std::vector<unsigned char> a(101), b(101), c(64);
  fill_pattern(a.data(), a.size(), 1);
  fill_pattern(b.data(), b.size(), 2);
  fill_pattern(c.data(), c.size(), 1);
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), c.size()), 0);
}

}  // namespace
}  // namespace htp::test
