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

TEST(belady_min, the_trace_oracle_matches_the_cyclic_sweep_on_a_cyclic_trace) {
  // n equal tensors swept cyclically: the trace oracle's misses after warm-up are the closed form.
  const std::size_t n = 6, k = 4, cycles = 2 + (n - 1);
  const std::vector<std::uint64_t> sizes(n, 1000);
  std::vector<std::size_t> trace;
  for (std::size_t c = 0; c < cycles + 1; ++c) {  // one more cycle: no end effect on the measured
    for (std::size_t i = 0; i < n; ++i) trace.push_back(i);
  }
  const std::uint64_t moved = belady_trace_bytes(sizes, sizes, trace, k * 1000, 2 * n);
  const std::uint64_t last = belady_trace_bytes(sizes, sizes, trace, k * 1000, cycles * n);
  EXPECT_DOUBLE_EQ(static_cast<double>(moved - last) / static_cast<double>(n - 1),
                   belady_bytes_per_cycle(sizes, k * 1000));
}

TEST(belady_min, the_trace_oracle_evicts_what_is_never_used_again_and_counts_its_own_bytes) {
  // Room for two: a b c a b ... c is never used again after position 2, so a and b stay once c
  // has gone; 4 misses: a, b, c (evicting the farther of a and b: b, used at 4), then b.
  const std::vector<std::size_t> trace{0, 1, 2, 0, 1, 0, 1};
  const std::vector<std::uint64_t> footprint{10, 10, 10}, counted{1, 100, 10000};
  EXPECT_EQ(belady_trace_bytes(footprint, counted, trace, 20), 1u + 100u + 10000u + 100u);
  EXPECT_EQ(belady_trace_bytes(footprint, counted, trace, 20, 3), 100u);
  EXPECT_EQ(belady_trace_bytes(footprint, counted, trace, 30), 1u + 100u + 10000u);
}

}  // namespace
}  // namespace htp::bench
