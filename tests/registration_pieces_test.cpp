// How the cuda device cuts a host range of any size into driver registrations and a copy into the
// parts that stay inside one registration (detail/registration_pieces.hpp). Pure arithmetic: the
// cuda backend's use of it runs only on a GPU.
#include <htp/detail/registration_pieces.hpp>

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace htp::test {
namespace {

using parts = std::vector<std::pair<std::size_t, std::size_t>>;

parts cut(std::size_t offset, std::size_t bytes, std::size_t piece) {
  parts out;
  detail::for_each_registration_piece(
      offset, bytes, piece, [&](std::size_t o, std::size_t n) { out.emplace_back(o, n); });
  return out;
}

TEST(registration_pieces, a_range_is_cut_at_every_multiple_of_the_piece) {
  EXPECT_EQ(cut(0, 10, 4), (parts{{0, 4}, {4, 4}, {8, 2}}));
  EXPECT_EQ(cut(0, 8, 4), (parts{{0, 4}, {4, 4}}));
  EXPECT_EQ(cut(0, 3, 4), (parts{{0, 3}}));
  EXPECT_TRUE(cut(5, 0, 4).empty());
}

TEST(registration_pieces, a_copy_crossing_a_boundary_is_split_there_and_covers_every_byte) {
  EXPECT_EQ(cut(3, 2, 4), (parts{{3, 1}, {4, 1}}));
  EXPECT_EQ(cut(2, 9, 4), (parts{{2, 2}, {4, 4}, {8, 3}}));
  EXPECT_EQ(cut(4, 4, 4), (parts{{4, 4}}));  // inside one piece: one copy
  // A 2 MiB chunk across the boundary of two 256 GiB pieces: two copies.
  const std::size_t p = detail::max_registration_piece, chunk = std::size_t{2} << 20;
  EXPECT_EQ(cut(p - chunk / 2, chunk, p), (parts{{p - chunk / 2, chunk / 2}, {p, chunk / 2}}));
  EXPECT_LT(detail::max_registration_piece, std::size_t{512} << 30);  // below the driver's limit
}

}  // namespace
}  // namespace htp::test
