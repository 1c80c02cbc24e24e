// Example tests of the slab allocator, one rule each, on the sim device.
#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>
#include <htp/slab_allocator.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <set>
#include <string>
#include <vector>

namespace htp::test {
namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t slab = 64 * KiB;

std::unique_ptr<device> make_dev() {
  sim_config c;
  c.device_memory_bytes = std::size_t{64} << 20;
  c.pinned_memory_bytes = std::size_t{64} << 20;
  return make_sim_device(c);
}

slab_allocator_config small_config(std::size_t slabs, tier t = tier::hbm) {
  slab_allocator_config c;
  c.t = t;
  c.budget_bytes = slabs * slab;
  c.slab_bytes = slab;
  return c;
}

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

class slab_allocator_test : public ::testing::Test {
 protected:
  std::unique_ptr<device> dev = make_dev();
};

TEST_F(slab_allocator_test, rejects_bad_configs_naming_the_field) {
  auto expect_bad = [&](slab_allocator_config c, const char* field) {
    try {
      slab_allocator a(*dev, c);
      FAIL() << "config accepted, expected a complaint about " << field;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  auto c = small_config(4);
  c.slab_bytes = 3 * slab;
  expect_bad(c, "slab_bytes");
  c = small_config(4);
  c.slab_bytes = 32 * KiB;
  expect_bad(c, "slab_bytes");
  c = small_config(4);
  c.budget_bytes = slab - 1;
  expect_bad(c, "budget_bytes");
  c = small_config(4);
  c.compaction_threshold = 1.5;
  expect_bad(c, "compaction_threshold");
}

TEST_F(slab_allocator_test, reserves_the_budget_up_front_and_never_on_the_allocation_path) {
  const std::size_t before = dev->memory().free_bytes;
  slab_allocator a(*dev, small_config(32));
  const std::size_t after_ctor = dev->memory().free_bytes;
  EXPECT_EQ(before - after_ctor, 32 * slab);
  std::vector<extent> live;
  for (std::size_t n : {std::size_t{1}, 300 * std::size_t{1}, 5 * KiB, 40 * KiB, 3 * slab}) {
    live.push_back(a.allocate(n));
  }
  EXPECT_EQ(dev->memory().free_bytes, after_ctor);
  for (auto& e : live) a.deallocate(e.ptr, e.bytes);
  EXPECT_EQ(dev->memory().free_bytes, after_ctor);
}

TEST_F(slab_allocator_test, small_requests_come_from_size_class_bins_aligned_and_bounded) {
  slab_allocator a(*dev, small_config(32));
  for (std::size_t n = 1; n < slab / 2; n = n * 5 / 4 + 1) {
    const std::size_t r = a.rounded_size(n);
    EXPECT_GE(r, n);
    EXPECT_EQ(r % 256, 0u) << n;
    EXPECT_LT(r - n, std::max<std::size_t>(256, n / 4 + 1)) << "waste bound broken at " << n;
    extent e = a.allocate(n);
    EXPECT_EQ(addr(e.ptr) % 256, 0u);
    EXPECT_EQ(e.bytes, n);
    a.deallocate(e.ptr, e.bytes);
  }
  // Two small blocks of one class share a slab.
  extent x = a.allocate(1000), y = a.allocate(1000);
  EXPECT_EQ(addr(x.ptr) / slab, addr(y.ptr) / slab);
  auto st = a.statistics();
  EXPECT_EQ(st.classes[3].pages, 1u);
  EXPECT_EQ(st.classes[3].block_bytes, 1024u);
  EXPECT_EQ(st.classes[3].blocks_in_use, 2u);
  a.deallocate(x.ptr, 1000);
  a.deallocate(y.ptr, 1000);
}

TEST_F(slab_allocator_test, half_a_slab_or_more_gets_a_contiguous_run_of_whole_slabs) {
  slab_allocator a(*dev, small_config(16));
  extent half = a.allocate(slab / 2);
  EXPECT_EQ(a.rounded_size(slab / 2), slab);
  extent big = a.allocate(5 * slab + 1);
  auto st = a.statistics();
  EXPECT_EQ(st.run_pages, 1u + 6u);
  EXPECT_EQ(st.bin_pages, 0u);
  // The run is contiguous: writing all of it touches no other allocation.
  std::memset(big.ptr, 0x5a, big.bytes);
  std::memset(half.ptr, 0x11, half.bytes);
  EXPECT_EQ(static_cast<unsigned char*>(big.ptr)[big.bytes - 1], 0x5a);
  EXPECT_TRUE(addr(big.ptr) + 6 * slab <= addr(half.ptr) || addr(half.ptr) + slab <= addr(big.ptr));
  a.deallocate(big.ptr, big.bytes);
  a.deallocate(half.ptr, half.bytes);
  EXPECT_EQ(a.statistics().free_pages, 16u);
}

TEST_F(slab_allocator_test, statistics_count_bytes_slabs_peaks_and_calls) {
  slab_allocator a(*dev, small_config(16));
  extent s1 = a.allocate(100), s2 = a.allocate(3000), l1 = a.allocate(2 * slab);
  auto st = a.statistics();
  EXPECT_EQ(st.bytes_in_use, 100u + 3000u + 2 * slab);
  EXPECT_EQ(st.live_allocations, 3u);
  EXPECT_EQ(st.pages_in_use, 4u);  // two bin slabs (classes 256 and 3072) + a 2-slab run
  EXPECT_EQ(st.allocations, 3u);
  a.deallocate(l1.ptr, l1.bytes);
  st = a.statistics();
  EXPECT_EQ(st.bytes_in_use, 3100u);
  EXPECT_EQ(st.bytes_in_use_peak, 3100u + 2 * slab);
  EXPECT_EQ(st.pages_in_use_peak, 4u);
  EXPECT_EQ(st.deallocations, 1u);
  a.deallocate(s1.ptr, s1.bytes);
  a.deallocate(s2.ptr, s2.bytes);
  EXPECT_EQ(a.statistics().bytes_in_use, 0u);
  a.audit();
}

/// Runs `call`, expects invalid_argument whose message contains every fragment, and checks that
/// the allocator's statistics did not move.
template <typename F>
void expect_rejected(slab_allocator& a, F call, std::vector<std::string> fragments) {
  const auto before = a.statistics();
  try {
    call();
    ADD_FAILURE() << "call accepted";
  } catch (const invalid_argument& e) {
    for (auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
  const auto after = a.statistics();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.free_pages, before.free_pages);
  EXPECT_EQ(after.deallocations, before.deallocations);
  EXPECT_EQ(after.allocations, before.allocations);
  a.audit();
}

TEST_F(slab_allocator_test, bad_input_is_a_typed_error_naming_value_and_rule_and_changes_nothing) {
  slab_allocator a(*dev, small_config(8));
  extent small = a.allocate(1000);
  extent big = a.allocate(slab);
  expect_rejected(a, [&] { a.allocate(0); }, {"allocate(0)", "at least one byte"});
  expect_rejected(a, [&] { a.allocate(9 * slab); }, {"589824", "more than the tier can ever hold"});
  std::vector<char> foreign(4096);
  void* aligned_foreign =
      reinterpret_cast<void*>((addr(foreign.data()) + 255) & ~std::uintptr_t{255});
  expect_rejected(a, [&] { a.deallocate(aligned_foreign, 10); }, {"unknown pointer"});
  expect_rejected(a, [&] { a.deallocate(static_cast<char*>(small.ptr) + 8, 1000); },
                  {"misaligned"});
  expect_rejected(a, [&] { a.deallocate(static_cast<char*>(small.ptr) + 256, 1000); },
                  {"inside a block"});
  expect_rejected(a, [&] { a.deallocate(small.ptr, 999); }, {"999", "wrong size", "1000"});
  expect_rejected(a, [&] { a.deallocate(big.ptr, slab - 1); }, {"wrong size"});
  expect_rejected(a, [&] { a.deallocate(static_cast<char*>(big.ptr) + 256, slab); },
                  {"inside an allocation"});
  expect_rejected(a, [&] { a.deallocate(nullptr, 1); }, {"null"});
  a.deallocate(small.ptr, 1000);
  a.deallocate(big.ptr, slab);
  expect_rejected(a, [&] { a.deallocate(small.ptr, 1000); }, {"double release"});
  expect_rejected(a, [&] { a.deallocate(big.ptr, slab); }, {"double release"});
}

TEST_F(slab_allocator_test, out_of_memory_says_what_and_why_and_changes_nothing_but_the_counter) {
  slab_allocator a(*dev, small_config(4));
  extent e1 = a.allocate(slab), e2 = a.allocate(slab), e3 = a.allocate(slab);
  a.deallocate(e2.ptr, e2.bytes);  // free: slabs 1 and 3, not adjacent
  const auto before = a.statistics();
  try {
    a.allocate(2 * slab);
    FAIL() << "allocated 2 slabs with no 2 adjacent free";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.requested_bytes(), 2 * slab);
    for (const char* f : {"131072", "hbm", "fragmentation", "largest free extent 65536", "combined",
                          "plan_compaction", "budget_bytes"}) {
      EXPECT_NE(m.find(f), std::string::npos) << f << " missing from: " << m;
    }
  }
  const auto after = a.statistics();
  EXPECT_EQ(after.failed_requests, before.failed_requests + 1);
  EXPECT_EQ(after.free_pages, before.free_pages);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_THROW(a.allocate(2 * slab), std::bad_alloc);
  a.deallocate(e1.ptr, e1.bytes);
  a.deallocate(e3.ptr, e3.bytes);
}

TEST_F(slab_allocator_test, fragmentation_figures_follow_their_definitions) {
  slab_allocator a(*dev, small_config(8));
  std::vector<extent> runs;
  for (int i = 0; i < 8; ++i) runs.push_back(a.allocate(slab));
  EXPECT_DOUBLE_EQ(a.fragmentation().external, 0.0);
  for (int i : {1, 3, 4}) a.deallocate(runs[i].ptr, runs[i].bytes);
  auto f = a.fragmentation();
  EXPECT_EQ(f.free_pages, 3u);
  EXPECT_EQ(f.largest_free_extent_bytes, 2 * slab);
  EXPECT_DOUBLE_EQ(f.external, 1.0 - 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(f.internal, 0.0);
  EXPECT_DOUBLE_EQ(f.combined, 1.0 / 8.0);  // one stranded free slab of eight
  // A 1 KiB block in a fresh bin slab: the slab's other 63 KiB are internal waste.
  extent b = a.allocate(1024);
  f = a.fragmentation();
  EXPECT_DOUBLE_EQ(f.internal, 63.0 / 64.0);
  EXPECT_EQ(a.audit().combined, f.combined);
  a.deallocate(b.ptr, b.bytes);
  for (int i : {0, 2, 5, 6, 7}) a.deallocate(runs[i].ptr, runs[i].bytes);
}

TEST_F(slab_allocator_test, should_compact_follows_the_threshold) {
  auto c = small_config(8);
  c.compaction_threshold = 0.2;
  slab_allocator a(*dev, c);
  std::vector<extent> runs;
  for (int i = 0; i < 8; ++i) runs.push_back(a.allocate(slab));
  a.deallocate(runs[1].ptr, slab);
  a.deallocate(runs[3].ptr, slab);  // combined 1/8 < 0.2
  EXPECT_FALSE(a.should_compact());
  a.deallocate(runs[5].ptr, slab);  // combined 2/8 >= 0.2
  EXPECT_TRUE(a.should_compact());
}

TEST_F(slab_allocator_test, stream_ordered_release_waits_for_the_event) {
  slab_allocator a(*dev, small_config(4));
  stream s(*dev);
  std::promise<void> gate;
  std::shared_future<void> f = gate.get_future().share();
  dev->launch_host_func([f] { f.wait(); }, s);
  extent big = a.allocate(4 * slab);  // the whole tier
  a.deallocate_after(big.ptr, big.bytes, s);
  EXPECT_EQ(a.statistics().pending_releases, 1u);
  // Not reusable while a "kernel" on s may still read it.
  EXPECT_THROW(a.allocate(slab), out_of_memory);
  EXPECT_EQ(a.reap(), 0u);
  EXPECT_THROW(a.deallocate(big.ptr, big.bytes), invalid_argument);  // double release (pending)
  EXPECT_THROW(a.deallocate_after(big.ptr, big.bytes, s), invalid_argument);
  gate.set_value();
  s.synchronize();
  extent again = a.allocate(4 * slab);  // reaped on this call
  EXPECT_EQ(again.ptr, big.ptr);
  auto st = a.statistics();
  EXPECT_EQ(st.pending_releases, 0u);
  EXPECT_EQ(st.deallocations, 1u);
  a.deallocate(again.ptr, again.bytes);
}

TEST_F(slab_allocator_test, stream_ordered_release_of_bin_blocks_and_synchronize_pending) {
  slab_allocator a(*dev, small_config(4));
  stream s(*dev);
  std::promise<void> gate;
  std::shared_future<void> f = gate.get_future().share();
  dev->launch_host_func([f] { f.wait(); }, s);
  extent x = a.allocate(4000);
  a.deallocate_after(x.ptr, x.bytes, s);
  std::set<void*> seen;
  for (int i = 0; i < 15; ++i) seen.insert(a.allocate(4000).ptr);  // 16 blocks of 4 KiB per slab
  EXPECT_EQ(seen.count(x.ptr), 0u) << "a block pending release was handed out again";
  auto st = a.statistics();
  EXPECT_EQ(st.pending_release_bytes, 4000u);
  EXPECT_EQ(st.bytes_in_use, 16u * 4000u);
  std::thread opener([&] { gate.set_value(); });
  a.synchronize_pending();
  opener.join();
  EXPECT_EQ(a.statistics().pending_releases, 0u);
  EXPECT_EQ(a.allocate(4000).ptr, x.ptr);
  a.audit();
}

/// Fills every live extent with its own pattern and returns the checksums.
std::map<void*, std::uint64_t> fill_all(const std::vector<extent>& live) {
  std::map<void*, std::uint64_t> sums;
  for (const extent& e : live) {
    fill_pattern(e.ptr, e.bytes, addr(e.ptr));
    sums[e.ptr] = checksum(e.ptr, e.bytes);
  }
  return sums;
}

TEST_F(slab_allocator_test, compaction_of_bins_frees_whole_slabs_and_preserves_bytes) {
  slab_allocator a(*dev, small_config(16));
  std::vector<extent> live;
  for (int i = 0; i < 64; ++i) live.push_back(a.allocate(4000));  // 4 full slabs of 16 blocks
  // Free 3 of every 4: each slab keeps 4 blocks.
  std::vector<extent> kept;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i % 4 == 0) {
      kept.push_back(live[i]);
    } else {
      a.deallocate(live[i].ptr, live[i].bytes);
    }
  }
  // One allocation is not movable (acquired by a kernel, say).
  void* pinned = kept[0].ptr;
  auto sums = fill_all(kept);
  EXPECT_EQ(a.statistics().bin_pages, 4u);
  compaction_plan p = a.plan_compaction([&](const extent& e) { return e.ptr != pinned; });
  EXPECT_EQ(p.pages_freed, 3u);
  EXPECT_EQ(p.moves.size(), 12u);
  std::set<void*> dests;
  for (const slab_move& m : p.moves) {
    EXPECT_NE(m.from.ptr, pinned);
    EXPECT_EQ(m.from.bytes, m.to.bytes);
    EXPECT_TRUE(dests.insert(m.to.ptr).second) << "two moves share a destination";
    for (const extent& e : kept) EXPECT_NE(e.ptr, m.to.ptr) << "destination overlaps a live extent";
    // A destination is reserved: the allocator does not hand it out meanwhile.
  }
  std::vector<extent> extra;
  for (int i = 0; i < 8; ++i) extra.push_back(a.allocate(4000));
  for (const extent& e : extra) EXPECT_EQ(dests.count(e.ptr), 0u);
  for (const extent& e : extra) a.deallocate(e.ptr, e.bytes);
  for (const slab_move& m : p.moves) {
    std::memcpy(m.to.ptr, m.from.ptr, m.from.bytes);
    a.commit_move(m);
    auto it = std::find_if(kept.begin(), kept.end(),
                           [&](const extent& e) { return e.ptr == m.from.ptr; });
    sums[m.to.ptr] = sums.at(m.from.ptr);
    sums.erase(m.from.ptr);
    it->ptr = m.to.ptr;
  }
  EXPECT_THROW(a.commit_move(p.moves[0]), invalid_argument);  // committed already
  // The evacuated pages took none of the extra blocks (they went to a fresh page, now the cached
  // empty one), so all three were freed: the destination and the cached page remain.
  EXPECT_EQ(a.statistics().bin_pages, 2u);
  EXPECT_EQ(a.statistics().moves_committed, 12u);
  for (const extent& e : kept) EXPECT_EQ(checksum(e.ptr, e.bytes), sums.at(e.ptr));
  EXPECT_EQ(a.statistics().bytes_in_use, 16u * 4000u);
  a.audit();
  for (const extent& e : kept) a.deallocate(e.ptr, e.bytes);
  EXPECT_EQ(a.statistics().bin_pages, 1u);  // one empty slab stays cached per class
  a.audit();
}

TEST_F(slab_allocator_test, compaction_for_a_request_rebuilds_a_contiguous_run) {
  slab_allocator a(*dev, small_config(8));
  std::vector<extent> runs;
  for (int i = 0; i < 8; ++i) runs.push_back(a.allocate(slab));
  for (int i : {1, 3, 5, 7}) a.deallocate(runs[i].ptr, slab);
  std::vector<extent> kept = {runs[0], runs[2], runs[4], runs[6]};
  void* fixed = runs[4].ptr;
  auto sums = fill_all(kept);
  EXPECT_THROW(a.allocate(3 * slab), out_of_memory);
  compaction_plan p = a.plan_compaction([&](const extent& e) { return e.ptr != fixed; }, 3 * slab);
  ASSERT_TRUE(p.satisfies_request);
  ASSERT_FALSE(p.moves.empty());
  for (const slab_move& m : p.moves) {
    EXPECT_NE(m.from.ptr, fixed);
    std::memcpy(m.to.ptr, m.from.ptr, m.from.bytes);
    a.commit_move(m);
    sums[m.to.ptr] = sums.at(m.from.ptr);
    sums.erase(m.from.ptr);
  }
  extent big = a.allocate(3 * slab);
  for (auto& [ptr, sum] : sums) EXPECT_EQ(checksum(ptr, slab), sum);
  a.audit();
  a.deallocate(big.ptr, big.bytes);
  for (auto& [ptr, sum] : sums) a.deallocate(ptr, slab);
}

TEST_F(slab_allocator_test, full_compaction_packs_runs_and_cancel_returns_destinations) {
  slab_allocator a(*dev, small_config(8));
  std::vector<extent> runs;
  for (int i = 0; i < 8; ++i) runs.push_back(a.allocate(slab));
  for (int i : {0, 2, 4}) a.deallocate(runs[i].ptr, slab);
  const auto before = a.fragmentation();
  EXPECT_GT(before.external, 0.0);
  compaction_plan p = a.plan_compaction([](const extent&) { return true; });
  ASSERT_FALSE(p.moves.empty());
  EXPECT_EQ(a.statistics().move_destinations, p.moves.size());
  EXPECT_THROW(a.deallocate(p.moves[0].to.ptr, p.moves[0].to.bytes), invalid_argument);
  for (const slab_move& m : p.moves) a.cancel_move(m);
  EXPECT_THROW(a.cancel_move(p.moves[0]), invalid_argument);
  EXPECT_EQ(a.fragmentation().external, before.external);
  p = a.plan_compaction([](const extent&) { return true; });
  for (const slab_move& m : p.moves) a.commit_move(m);
  EXPECT_DOUBLE_EQ(a.fragmentation().external, 0.0);
  EXPECT_EQ(a.statistics().bytes_in_use, 5 * slab);
  a.audit();
}

TEST_F(slab_allocator_test, unmovable_allocations_are_never_planned) {
  slab_allocator a(*dev, small_config(32));
  std::vector<extent> live;
  for (int i = 0; i < 40; ++i) live.push_back(a.allocate(i % 2 ? 4000 : slab));
  for (std::size_t i = 0; i < live.size(); i += 3) a.deallocate(live[i].ptr, live[i].bytes);
  compaction_plan p = a.plan_compaction([](const extent&) { return false; });
  EXPECT_TRUE(p.moves.empty());
  a.audit();
}

TEST_F(slab_allocator_test, host_tier_pins_in_background_and_reports_the_cost) {
  auto c = small_config(64, tier::host);
  c.slabs_per_reservation = 8;
  c.pin_threads = 3;
  c.pin_in_background = true;
  slab_allocator a(*dev, c);
  extent e = a.allocate(8 * slab);  // waits only if its slabs are not pinned yet
  EXPECT_EQ(a.max_request_bytes(), 8 * slab);
  EXPECT_THROW(a.allocate(9 * slab), invalid_argument);  // a run never crosses a reservation
  a.wait_reserved();
  auto st = a.statistics();
  EXPECT_TRUE(st.reservation_complete);
  EXPECT_EQ(st.ready_pages, 64u);
  EXPECT_GE(st.pin_seconds_per_gib, 0.0);
  EXPECT_EQ(st.t, tier::host);
  EXPECT_EQ(dev->mapped_device_pointer(e.ptr), e.ptr);  // it is pinned host memory
  a.deallocate(e.ptr, e.bytes);
  a.audit();
}

TEST_F(slab_allocator_test, a_failed_reservation_returns_what_was_taken) {
  sim_config sc;
  sc.device_memory_bytes = 10 * slab;
  auto d = make_sim_device(sc);
  auto c = small_config(16);
  c.slabs_per_reservation = 4;
  c.pin_threads = 1;
  EXPECT_THROW(slab_allocator(*d, c), out_of_memory);
  EXPECT_EQ(d->memory().free_bytes, 10 * slab);
}

}  // namespace
}  // namespace htp::test
