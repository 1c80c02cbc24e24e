// The pager at real-model scale: absurd budgets and config errors, recycled release events, block
// tables (list acquire/release), caller-owned host memory, and the schedule at its edges. Tensors
// of real-model size (GB each) are in pager_model_size_test.cpp, a binary that runs alone.
#include "pager_fixture.hpp"
#include "throws_naming.hpp"

#include <htp/checksum.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstring>
#include <random>
#include <string>

namespace htp::test {
namespace {

TEST(pager_scale, a_host_budget_above_memtotal_is_not_refused) {
  // A microVM's MemTotal can read far below the RAM it can use, so physical memory is no bound on
  // the host budget (the address space is): the pager starts, and what the host cannot pin fails
  // typed, when it is pinned (the first slab here; the sim's capacity stands for the host's).
  const auto phys = static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) *
                    static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  ASSERT_GT(phys, 0u);
  auto c = small_pager_config(4);
  c.host_budget_bytes = (2 * phys / slab + 1) * slab;
  sim_config roomy;
  roomy.device_memory_bytes = 64 << 20;
  roomy.pinned_memory_bytes = 0;  // no limit: the host's own (mapped lazily, never touched here)
  auto dev = make_sim_device(roomy);
  {
    pager p(*dev, c);
    EXPECT_EQ(p.config().host_budget_bytes, c.host_budget_bytes);
    const auto h = p.register_tensor("w", 2 * slab, tensor_kind::weight);
    EXPECT_EQ(p.metrics().host.used_bytes, 2 * slab);
    p.unregister_tensor(h);
  }
  auto tight = small_sim_device();  // 128 MiB of pinned memory: less than the first slab
  try {
    pager p(*tight, c);
  } catch (const out_of_memory& e) {
    EXPECT_EQ(std::string(e.what()).find("pager_config.host_budget_bytes"), std::string::npos)
        << "refused by the budget check, not by the pin: " << e.what();
  }
}

TEST(pager_scale, absurd_budgets_are_out_of_memory_naming_the_field) {
  auto dev = small_sim_device();
  auto c = small_pager_config(4);
  c.hbm_budget_bytes = std::size_t{1} << 62;
  try {
    pager p(*dev, c);
    FAIL() << "a 2^62-byte HBM budget was accepted";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("pager_config.hbm_budget_bytes"), std::string::npos)
        << e.what();
  }
  c = small_pager_config(4);
  c.host_budget_bytes = std::size_t{1} << 62;
  try {
    pager p(*dev, c);
    FAIL() << "a 2^62-byte host budget was accepted";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("pager_config.host_budget_bytes"), std::string::npos)
        << e.what();
  }
  c = small_pager_config(4);
  c.slab_bytes = 3;
  EXPECT_TRUE(throws_naming([&] { pager p(*dev, c); }, {"pager_config.slab_bytes"}));
  // Every config error names the field as the user set it, and its value.
  c = small_pager_config(4);
  c.max_in_flight_chunks = 0;
  EXPECT_TRUE(throws_naming([&] { pager p(*dev, c); }, {"pager_config.max_in_flight_chunks is 0"}));
  c = small_pager_config(4);
  c.h2d.rate_bytes_per_second = 0;
  EXPECT_TRUE(
      throws_naming([&] { pager p(*dev, c); }, {"pager_config.h2d.rate_bytes_per_second is 0"}));
  c = small_pager_config(4);
  c.d2h.burst_bytes = 1;
  EXPECT_TRUE(throws_naming([&] { pager p(*dev, c); }, {"pager_config.d2h.burst_bytes is 1"}));
  c = small_pager_config(4);
  c.latency_budget = std::chrono::milliseconds(-5);
  EXPECT_TRUE(throws_naming([&] { pager p(*dev, c); }, {"pager_config.latency_budget is -5"}));
  c = small_pager_config(4);
  pager p(*dev, c);
  EXPECT_TRUE(throws_naming([&] { p.register_tensor("huge", 5 * slab, tensor_kind::weight); },
                            {"pager_config.hbm_budget_bytes"}));
}

TEST(pager_scale, release_events_are_recycled_for_a_resident_tensor) {
  auto dev = small_sim_device();
  pager p(*dev, small_pager_config(4));
  stream a(*dev), b(*dev);
  const auto bytes = payload(slab, 1);
  const auto h = p.register_tensor("w", slab, tensor_kind::weight, bytes.data());
  for (int i = 0; i < 100000; ++i) {
    stream& s = i % 2 == 0 ? a : b;
    p.acquire(h, s);
    p.release(h, s);
  }
  a.synchronize();
  b.synchronize();
  // One per stream that released it, plus a few in the pool; not one per release.
  EXPECT_LE(p.metrics().events_created, 8u);
}

TEST(pager_scale, a_block_table_is_acquired_and_released_in_one_call_with_one_event) {
  auto dev = small_sim_device();
  pager p(*dev, small_pager_config(64));
  stream compute(*dev);
  checksum_slot slot(*dev);
  std::vector<tensor_handle> blocks;
  std::vector<std::uint64_t> sums;
  for (int i = 0; i < 48; ++i) {
    const auto b = payload(16 << 10, 500 + i);
    blocks.push_back(p.register_tensor("kv" + std::to_string(i), b.size(),
                                       tensor_kind::mutable_state, b.data()));
    sums.push_back(checksum(b.data(), b.size()));
  }
  const auto spans = p.acquire(blocks, compute);
  ASSERT_EQ(spans.size(), blocks.size());
  for (std::size_t i = 0; i < spans.size(); ++i) {
    dev->checksum_async(spans[i].data, spans[i].bytes, slot.value, compute);
    compute.synchronize();
    EXPECT_EQ(*slot.value, sums[i]) << "block " << i;
  }
  const auto events_before = p.metrics().events_created;
  p.release(blocks, compute);
  EXPECT_LE(p.metrics().events_created, events_before + 1);
  for (auto b : blocks) EXPECT_EQ(p.info(b).pins, 0);
  // A repeated handle is refused before anything is pinned.
  EXPECT_TRUE(throws_naming(
      [&] {
        p.acquire({blocks[0], blocks[1], blocks[0]}, compute);
      },
      {"appears twice"}));
  EXPECT_EQ(p.info(blocks[0]).pins, 0);
  EXPECT_EQ(p.info(blocks[1]).pins, 0);
}

TEST(pager_scale, a_block_table_that_does_not_fit_is_all_or_nothing) {
  auto dev = small_sim_device();
  pager p(*dev, small_pager_config(4));
  stream compute(*dev);
  std::vector<tensor_handle> blocks;
  for (int i = 0; i < 6; ++i)
    blocks.push_back(p.register_tensor("kv" + std::to_string(i), slab, tensor_kind::mutable_state));
  EXPECT_THROW(p.acquire(blocks, compute), out_of_memory);
  for (auto b : blocks) EXPECT_EQ(p.info(b).pins, 0);
  const auto m = p.metrics();
  EXPECT_EQ(m.acquires, m.hits + m.faults + m.degraded_acquires + m.failed_acquires + m.oom.thrown);
  // What fits is acquired afterwards as usual.
  const std::vector<tensor_handle> four(blocks.begin(), blocks.begin() + 4);
  p.acquire(four, compute);
  p.release(four, compute, /*dirty=*/true);
  compute.synchronize();
}

TEST(pager_scale, caller_memory_is_never_copied_and_receives_write_backs) {
  auto dev = small_sim_device();
  const std::size_t pinned_before = sim_pinned_bytes_in_use(*dev);
  auto c = small_pager_config(4);
  c.host_budget_bytes = 0;  // no host tier: every tensor lives in caller memory
  pager p(*dev, c);
  stream compute(*dev);
  checksum_slot slot(*dev);
  const int n = 32;
  std::vector<char> model(n * slab);
  for (int i = 0; i < n; ++i) fill_pattern(model.data() + i * slab, slab, 900 + i);
  p.add_host_region(model.data(), model.size(), host_region_kind::pageable);
  std::vector<tensor_handle> hs;
  for (int i = 0; i < n; ++i) {
    hs.push_back(p.register_tensor_at("t" + std::to_string(i), slab, tensor_kind::mutable_state,
                                      model.data() + i * slab));
  }
  // htp's own host memory: the engine's completion words only (stated in docs/pager.md).
  const std::size_t overhead =
      sim_pinned_bytes_in_use(*dev) - pinned_before - sizeof(std::uint64_t);
  EXPECT_LE(overhead, std::size_t{64} << 10);
  const auto m0 = p.metrics();
  EXPECT_EQ(m0.host.capacity_bytes, 0u);
  EXPECT_EQ(m0.caller_host_bytes, model.size());
  EXPECT_THROW(p.register_tensor("own", 100, tensor_kind::weight), invalid_argument);

  // Never copied: a change made after registration is what the device reads.
  fill_pattern(model.data(), slab, 12345);
  EXPECT_EQ(device_checksum(p, *dev, hs[0], compute, slot), checksum(model.data(), slab));

  // A dirty tensor is written back into the caller's memory on eviction.
  const auto s = p.acquire(hs[1], compute);
  dev->fill_pattern_async(s.data, s.bytes, 777, compute);
  p.release(hs[1], compute, /*dirty=*/true);
  p.evict(hs[1]);
  const auto expect = payload(slab, 777);
  EXPECT_EQ(checksum(model.data() + slab, slab), checksum(expect.data(), slab));

  // The region stays lent while tensors live in it; htp never frees it.
  EXPECT_TRUE(throws_naming([&] { p.remove_host_region(model.data()); }, {"still live"}));
  for (auto h : hs) p.unregister_tensor(h);
  p.remove_host_region(model.data());
  EXPECT_TRUE(
      throws_naming([&] { p.register_tensor_at("late", slab, tensor_kind::weight, model.data()); },
                    {"add_host_region"}));
}

TEST(pager_scale, weights_page_from_a_read_only_mapped_file) {
  char path[] = "/tmp/htp-weights-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::size_t bytes = 8 * slab;
  const auto content = payload(bytes, 4242);
  ASSERT_EQ(::write(fd, content.data(), bytes), static_cast<ssize_t>(bytes));
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ::unlink(path);
  ASSERT_NE(map, MAP_FAILED);
  {
    auto dev = small_sim_device();
    auto c = small_pager_config(2);
    c.host_budget_bytes = 0;
    pager p(*dev, c);
    stream compute(*dev);
    checksum_slot slot(*dev);
    p.add_host_region(map, bytes, host_region_kind::pageable_read_only);
    auto* base = static_cast<char*>(map);
    EXPECT_TRUE(
        throws_naming([&] { p.register_tensor_at("kv", slab, tensor_kind::mutable_state, base); },
                      {"read-only"}));
    std::vector<tensor_handle> hs;
    for (int i = 0; i < 8; ++i)
      hs.push_back(p.register_tensor_at("w" + std::to_string(i), slab, tensor_kind::weight,
                                        base + i * slab));
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(device_checksum(p, *dev, hs[i], compute, slot),
                  checksum(content.data() + i * slab, slab));
      }
    }
  }
  ::munmap(map, bytes);
}

/// A cyclic sweep of `layers` one-slab weights through `capacity` slabs; `fail_first` makes the
/// first acquire fail for lack of memory (a pinned blocker fills HBM) and then retries it.
std::uint64_t sweep_page_ins(bool fail_first, bool two_streams) {
  auto dev = small_sim_device();
  auto c = small_pager_config(4);
  c.prefetch_lookahead = 0;
  c.auto_compact = false;
  pager p(*dev, c);
  stream compute(*dev), other(*dev);
  std::vector<tensor_handle> hs;
  for (int i = 0; i < 7; ++i)
    hs.push_back(p.register_tensor("l" + std::to_string(i), slab, tensor_kind::weight));
  p.set_schedule(hs, /*cyclic=*/true);
  if (fail_first) {
    const auto blocker = p.register_tensor("blocker", 4 * slab, tensor_kind::weight);
    p.acquire(blocker, compute);
    EXPECT_THROW(p.acquire(hs[0], compute), out_of_memory);
    p.release(blocker, compute);
    compute.synchronize();
    p.unregister_tensor(blocker);
  }
  const auto before = p.metrics().page_ins;  // the blocker's own page-in is not the sweep's
  for (int step = 0; step < 4; ++step) {
    for (auto h : hs) {
      p.acquire(h, compute);
      if (two_streams) p.acquire(h, other);  // the same access, seen on a second stream
      p.release(h, compute);
      if (two_streams) p.release(h, other);
      compute.synchronize();
      other.synchronize();
    }
  }
  return p.metrics().page_ins - before;
}

TEST(pager_scale, a_failed_acquire_does_not_advance_the_schedule) {
  EXPECT_EQ(sweep_page_ins(true, false), sweep_page_ins(false, false));
}

TEST(pager_scale, acquiring_on_two_streams_is_one_access) {
  EXPECT_EQ(sweep_page_ins(false, true), sweep_page_ins(false, false));
}

/// Page-ins of `steps` cyclic passes over tensors of the given sizes (in slabs).
std::uint64_t unequal_page_ins(const std::vector<int>& sizes, std::size_t capacity,
                               unsigned lookahead, eviction_rule rule) {
  auto dev = small_sim_device();
  auto c = small_pager_config(capacity);
  c.prefetch_lookahead = lookahead;
  c.prefetch = prefetch_mode::min_page_ins;
  c.eviction = rule;
  // Background compaction moves tensors at times that depend on what is resident, so with it the
  // two runs' layouts (and so what fragmentation forces out) differ; the guarantee is about the
  // eviction decisions (docs/pager.md, "Prefetch and Belady's minimum").
  c.auto_compact = false;
  pager p(*dev, c);
  stream compute(*dev);
  std::vector<tensor_handle> hs;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    hs.push_back(p.register_tensor("t" + std::to_string(i),
                                   static_cast<std::size_t>(sizes[i]) * slab - 100,
                                   tensor_kind::weight));
  }
  // The whole run as one schedule (not cyclic), so nothing is prefetched past its end.
  std::vector<tensor_handle> trace;
  for (int step = 0; step < 5; ++step) trace.insert(trace.end(), hs.begin(), hs.end());
  p.set_schedule(trace, /*cyclic=*/false);
  for (auto h : trace) {
    p.acquire(h, compute);
    p.release(h, compute);
    compute.synchronize();
    p.synchronize();  // prefetches land before the next tensor, as with real compute
  }
  return p.metrics().page_ins;
}

TEST(pager_scale, prefetch_never_adds_page_ins_even_with_unequal_sizes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<int> sizes(6 + trial % 5);
    for (auto& s : sizes) s = 1 + static_cast<int>(rng() % 3);
    const std::size_t capacity = 5 + static_cast<std::size_t>(rng() % 4);
    for (eviction_rule rule : {eviction_rule::automatic, eviction_rule::lru}) {  // Belady, then LRU
      const auto demand = unequal_page_ins(sizes, capacity, 0, rule);
      for (unsigned k : {1u, 2u, 3u}) {
        EXPECT_LE(unequal_page_ins(sizes, capacity, k, rule), demand)
            << "trial " << trial << " lookahead " << k
            << (rule == eviction_rule::lru ? " (LRU)" : " (Belady)");
      }
    }
  }
}

}  // namespace
}  // namespace htp::test
