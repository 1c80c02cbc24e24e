// Schedule-aware paging on cyclic layer traces: with prefetch off, page-ins equal the minimum of an
// independent Belady simulation and LRU does worse; with lookahead, page-ins stay at the minimum
// while demand faults fall. Also the access schedule's cursor arithmetic.
#include "pager_fixture.hpp"

#include "pager/schedule.hpp"

#include <string>

namespace htp::test {
namespace {

/// Belady's MIN, written independently of the pager: a cache of `capacity` items; on a miss with a
/// full cache, evict the item whose next use is farthest in the future (or never).
std::size_t belady_misses(const std::vector<int>& trace, std::size_t capacity) {
  std::vector<int> cache;
  std::size_t misses = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (std::find(cache.begin(), cache.end(), trace[i]) != cache.end()) continue;
    ++misses;
    if (cache.size() == capacity) {
      std::size_t victim = 0, farthest = 0;
      for (std::size_t c = 0; c < cache.size(); ++c) {
        std::size_t next = trace.size() + 1;  // never again
        for (std::size_t j = i + 1; j < trace.size(); ++j) {
          if (trace[j] == cache[c]) {
            next = j;
            break;
          }
        }
        if (next >= farthest) {
          farthest = next;
          victim = c;
        }
      }
      cache.erase(cache.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    cache.push_back(trace[i]);
  }
  return misses;
}

/// `steps` passes over layers 0..layers-1.
std::vector<int> cyclic_trace(int layers, int steps) {
  std::vector<int> trace;
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < layers; ++i) trace.push_back(i);
  }
  return trace;
}

struct run_result {
  std::uint64_t page_ins;
  std::uint64_t faults;
};

/// Runs `steps` passes over `layers` one-slab weights with `capacity` slabs of HBM.
run_result run_cyclic(int layers, int capacity, int steps, eviction_rule rule, unsigned lookahead,
                      bool with_schedule, prefetch_mode mode = prefetch_mode::min_page_ins) {
  auto dev = small_sim_device();
  auto c = small_pager_config(static_cast<std::size_t>(capacity));
  c.eviction = rule;
  c.prefetch = mode;
  c.prefetch_lookahead = lookahead;
  c.auto_compact = false;
  pager p(*dev, c);
  stream compute(*dev);
  checksum_slot slot(*dev);
  std::vector<tensor_handle> hs;
  std::vector<std::uint64_t> sums;
  for (int i = 0; i < layers; ++i) {
    const auto b = payload(slab, 1000 + i);
    hs.push_back(
        p.register_tensor("layer" + std::to_string(i), slab, tensor_kind::weight, b.data()));
    sums.push_back(checksum(b.data(), b.size()));
  }
  if (with_schedule) p.set_schedule(hs, /*cyclic=*/true);
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < layers; ++i) {
      // device_checksum synchronizes the compute stream, so each layer's release has completed
      // before the next acquire: the trace is deterministic.
      const auto got = device_checksum(p, *dev, hs[i], compute, slot);
      EXPECT_EQ(got, sums[i]) << "step " << s << " layer " << i;
      p.synchronize();  // prefetches land before the next layer, as they would with real compute
    }
  }
  const auto m = p.metrics();
  return {m.page_ins, m.faults};
}

TEST(pager_schedule, page_ins_equal_beladys_minimum_and_lru_is_worse) {
  const int layers = 10, capacity = 6, steps = 5;
  const std::size_t min = belady_misses(cyclic_trace(layers, steps), capacity);
  const auto belady = run_cyclic(layers, capacity, steps, eviction_rule::automatic, 0, true);
  const auto lru = run_cyclic(layers, capacity, steps, eviction_rule::lru, 0, true);
  EXPECT_EQ(belady.page_ins, min);
  EXPECT_EQ(belady.faults, min);
  EXPECT_GT(lru.page_ins, min);
  // LRU on a cyclic sweep larger than memory misses every time.
  EXPECT_EQ(lru.page_ins, static_cast<std::uint64_t>(layers * steps));
}

TEST(pager_schedule, lookahead_keeps_page_ins_at_the_minimum_while_faults_fall) {
  const int layers = 10, capacity = 6, steps = 5;
  const std::size_t min = belady_misses(cyclic_trace(layers, steps), capacity);
  const auto none = run_cyclic(layers, capacity, steps, eviction_rule::automatic, 0, true);
  for (unsigned k : {1u, 2u}) {
    const auto ahead = run_cyclic(layers, capacity, steps, eviction_rule::automatic, k, true);
    EXPECT_EQ(ahead.page_ins, min) << "lookahead " << k;
    EXPECT_LT(ahead.faults, none.faults) << "lookahead " << k;
  }
}

TEST(pager_schedule, pipeline_prefetch_trades_page_ins_for_fewer_faults) {
  // In tight memory MIN keeps one slot rotating, so every load waits for the previous layer's
  // compute. The pipeline mode keeps lookahead + 1 slots rotating: more page-ins than the
  // minimum, bounded by one per layer, and prefetches instead of faults.
  const int layers = 10, capacity = 6, steps = 5;
  const std::size_t min = belady_misses(cyclic_trace(layers, steps), capacity);
  const auto none = run_cyclic(layers, capacity, steps, eviction_rule::automatic, 0, true);
  const auto piped = run_cyclic(layers, capacity, steps, eviction_rule::automatic, 2, true,
                                prefetch_mode::pipeline);
  EXPECT_GE(piped.page_ins, min);
  EXPECT_LE(piped.page_ins, static_cast<std::uint64_t>(layers * steps));
  EXPECT_LT(piped.faults, none.faults);
  EXPECT_LE(piped.faults, static_cast<std::uint64_t>(layers));  // after the first pass, none
}

TEST(pager_schedule, everything_fits_then_only_cold_misses) {
  const auto r = run_cyclic(5, 8, 4, eviction_rule::automatic, 0, true);
  EXPECT_EQ(r.page_ins, 5u);
}

TEST(access_schedule, cursor_distance_and_upcoming) {
  detail::access_schedule s;
  s.set({0, 1, 2, 1}, /*cyclic=*/true);
  EXPECT_EQ(s.distance(0), 0u);
  EXPECT_EQ(s.distance(1), 1u);
  EXPECT_EQ(s.distance(7), detail::access_schedule::never);
  s.on_access(0);
  EXPECT_EQ(s.upcoming(3), (std::vector<std::uint32_t>{1, 2, 1}));
  EXPECT_EQ(s.distance(0), 3u);  // wraps
  s.on_access(1);
  s.on_access(2);
  EXPECT_EQ(s.distance(1), 0u);
  s.on_access(1);
  EXPECT_EQ(s.upcoming(2), (std::vector<std::uint32_t>{0, 1}));
  s.set({0, 1}, /*cyclic=*/false);
  s.on_access(0);
  s.on_access(1);
  EXPECT_EQ(s.distance(0), detail::access_schedule::never);
  EXPECT_TRUE(s.upcoming(2).empty());
  s.set({0, 1, 2, 3}, true);
  EXPECT_EQ(s.distance_after(0, 2), 1u);  // after 2's use at position 2: 3, then 0
  EXPECT_EQ(s.distance_after(3, 2), 0u);
  EXPECT_EQ(s.distance_after(2, 2), 3u);
  EXPECT_EQ(s.distance_after(0, 9), detail::access_schedule::never);
  s.on_access(0);
  s.on_access(1);
  s.forget(1);
  EXPECT_EQ(s.upcoming(3), (std::vector<std::uint32_t>{2, 3, 0}));
}

}  // namespace
}  // namespace htp::test
