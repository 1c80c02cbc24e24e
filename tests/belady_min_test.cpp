// The stream bench's reference: bytes Belady's MIN moves per cycle of a cyclic sweep.
#include "shared/belady_min.hpp"

#include <gtest/gtest.h>

namespace htp::bench {
namespace {

TEST(belady_min, equal_sizes_match_the_closed_form_of_the_optimum) {
  // n tensors swept cyclically through room for k: the optimum misses n (n - k) / (n - 1) a cycle.
  for (const auto& [n, k] :
       std::vector<std::pair<int, int>>{{3, 2}, {4, 3}, {4, 2}, {8, 5}, {7, 3}, {6, 1}}) {
    const std::vector<std::uint64_t> sizes(static_cast<std::size_t>(n), 1000);
    EXPECT_DOUBLE_EQ(belady_bytes_per_cycle(sizes, static_cast<std::uint64_t>(k) * 1000),
                     1000.0 * n * (n - k) / (n - 1))
        << n << " tensors, room for " << k;
  }
}

TEST(belady_min, nothing_moves_when_all_fit_and_a_tensor_larger_than_memory_cannot_run) {
  EXPECT_EQ(belady_bytes_per_cycle({10, 20, 30}, 60), 0.0);
  EXPECT_EQ(belady_bytes_per_cycle({10, 200, 30}, 100), -1.0);
}

TEST(belady_min, unequal_sizes_move_at_least_what_does_not_fit) {
  const std::vector<std::uint64_t> sizes{8, 32, 8, 8, 32, 112, 112, 112};
  std::uint64_t total = 0;
  for (auto b : sizes) total += b;
  for (std::uint64_t cap : {150u, 250u, 350u}) {
    const double moved = belady_bytes_per_cycle(sizes, cap);
    EXPECT_GE(moved, static_cast<double>(total - cap))
        << cap;  // each cycle must bring back the rest
    EXPECT_LE(moved, static_cast<double>(total)) << cap;
  }
}

}  // namespace
}  // namespace htp::bench
