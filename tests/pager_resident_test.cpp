// Device-resident tensors (pager::register_resident): HBM for life, no host copy, never evicted.
#include "deadline.hpp"
#include "pager_fixture.hpp"

#include <future>
#include <string>

namespace htp::test {
namespace {

class pager_resident : public sim_pager_test {};

TEST_F(pager_resident, holds_its_bytes_in_hbm_and_no_host_memory) {
  pager p(*dev, small_pager_config(8));
  const auto bytes = payload(3 * slab + 17, 1);
  const tensor_handle h =
      p.register_resident("embedding", bytes.size(), tensor_kind::weight, bytes.data());
  const tensor_info i = p.info(h);
  EXPECT_EQ(i.where, residency::resident);
  EXPECT_TRUE(i.device_resident);
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(bytes.data(), bytes.size()));
  const pager_metrics m = p.metrics();
  EXPECT_EQ(m.host.used_bytes, 0u);
  EXPECT_EQ(m.device_resident_tensors, 1u);
  EXPECT_EQ(m.device_resident_bytes, bytes.size());
  EXPECT_EQ(m.hits, 1u);
  EXPECT_EQ(m.faults, 0u);
  EXPECT_EQ(m.page_in_bytes, 0u);
  std::vector<unsigned char> back(bytes.size());
  p.copy_to_host(h, back.data());
  EXPECT_EQ(back, bytes);
}

TEST_F(pager_resident, needs_no_host_tier_and_is_zero_filled_without_a_source) {
  auto c = small_pager_config(4);
  c.host_budget_bytes = 0;
  pager p(*dev, c);
  const tensor_handle h = p.register_resident("scratch", 2 * slab, tensor_kind::mutable_state);
  const std::vector<unsigned char> zeros(2 * slab, 0);
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(zeros.data(), zeros.size()));
}

TEST_F(pager_resident, is_never_evicted_while_paged_tensors_cycle_through_the_rest) {
  pager p(*dev, small_pager_config(4));
  const auto rb = payload(2 * slab, 7);
  const tensor_handle r =
      p.register_resident("resident", rb.size(), tensor_kind::weight, rb.data());
  std::vector<tensor_handle> hs;
  std::vector<std::uint64_t> sums;
  for (int i = 0; i < 4; ++i) {
    const auto b = payload(slab, 20 + i);
    hs.push_back(
        p.register_tensor("w" + std::to_string(i), b.size(), tensor_kind::weight, b.data()));
    sums.push_back(checksum(b.data(), b.size()));
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) ASSERT_EQ(device_checksum(p, *dev, hs[i], compute, slot), sums[i]);
    ASSERT_EQ(device_checksum(p, *dev, r, compute, slot), checksum(rb.data(), rb.size()));
  }
  p.compact();
  EXPECT_GT(p.metrics().evictions, 0u);
  EXPECT_EQ(p.info(r).where, residency::resident);
  EXPECT_EQ(device_checksum(p, *dev, r, compute, slot), checksum(rb.data(), rb.size()));
  EXPECT_THROW(p.evict(r), invalid_argument);
  EXPECT_EQ(p.info(r).where, residency::resident);
}

TEST_F(pager_resident, a_mutable_one_keeps_what_kernels_wrote_without_write_backs) {
  pager p(*dev, small_pager_config(4));
  const tensor_handle h = p.register_resident("workspace", slab, tensor_kind::mutable_state);
  const device_span s = p.acquire(h, compute);
  dev->fill_pattern_async(s.data, s.bytes, 99, compute);
  p.release(h, compute, /*dirty=*/true);
  compute.synchronize();
  EXPECT_FALSE(p.info(h).dirty);  // no host copy to be newer than
  const auto expect = payload(slab, 99);
  std::vector<unsigned char> back(slab);
  p.copy_to_host(h, back.data());
  EXPECT_EQ(back, expect);
  EXPECT_EQ(p.metrics().write_backs, 0u);
}

TEST_F(pager_resident, registration_evicts_paged_tensors_and_fails_cleanly_when_hbm_is_pinned) {
  pager p(*dev, small_pager_config(4));
  const auto ab = payload(2 * slab, 3);
  const tensor_handle a = p.register_tensor("a", ab.size(), tensor_kind::weight, ab.data());
  const tensor_handle b = p.register_tensor("b", 2 * slab, tensor_kind::weight);
  p.acquire(a, compute, true);
  p.acquire(b, compute, true);
  p.release(a, compute);
  compute.synchronize();
  // a is idle: it makes room, as for a fault.
  const tensor_handle r = p.register_resident("r", 2 * slab, tensor_kind::weight);
  EXPECT_EQ(p.info(a).where, residency::host);
  // Now b is pinned and r resident: nothing can go.
  const pager_metrics before = p.metrics();
  EXPECT_THROW(p.register_resident("too_many", slab, tensor_kind::weight), out_of_memory);
  const pager_metrics after = p.metrics();
  EXPECT_EQ(after.registered_tensors, before.registered_tensors);
  EXPECT_EQ(after.device_resident_tensors, 1u);
  EXPECT_EQ(after.hbm.used_bytes, before.hbm.used_bytes);
  EXPECT_EQ(after.oom.thrown, before.oom.thrown + 1);
  p.release(b, compute);
  compute.synchronize();
  const tensor_handle later = p.register_resident("later", slab, tensor_kind::weight);
  EXPECT_EQ(p.info(later).where, residency::resident);
  p.unregister_tensor(later);  // r and a fill HBM again
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot), checksum(ab.data(), ab.size()))
      << "a came back intact";
  (void)r;
}

TEST_F(pager_resident, bad_sizes_are_invalid_argument_and_unregistering_frees_its_hbm) {
  pager p(*dev, small_pager_config(4));
  EXPECT_THROW(p.register_resident("empty", 0, tensor_kind::weight), invalid_argument);
  EXPECT_THROW(p.register_resident("huge", 5 * slab, tensor_kind::weight), invalid_argument);
  const tensor_handle h = p.register_resident("r", 3 * slab, tensor_kind::weight);
  EXPECT_EQ(p.metrics().hbm.used_bytes, 3 * slab);
  p.unregister_tensor(h);
  const pager_metrics m = p.metrics();
  EXPECT_EQ(m.hbm.used_bytes, 0u);
  EXPECT_EQ(m.device_resident_tensors, 0u);
  EXPECT_EQ(m.device_resident_bytes, 0u);
  EXPECT_EQ(m.registered_tensors, 0u);
  EXPECT_THROW(p.info(h), invalid_argument);
}

TEST_F(pager_resident, the_fill_waits_for_kernels_still_reading_the_memory_it_takes) {
  pager p(*dev, small_pager_config(2));
  const auto ab = payload(2 * slab, 61);
  const tensor_handle a = p.register_tensor("a", ab.size(), tensor_kind::weight, ab.data());
  gate g;
  const device_span sa = p.acquire(a, compute, /*wait=*/true);
  g.hold(*dev, compute);  // the kernel reading a has not run yet
  dev->checksum_async(sa.data, sa.bytes, slot.value, compute);
  p.release(a, compute);
  const auto rb = payload(2 * slab, 62);
  auto registering = std::async(std::launch::async, [&] {
    return p.register_resident("r", rb.size(), tensor_kind::weight, rb.data());
  });
  // Once a is evicted (counted under the pager's lock, in the same hold as the fill's device-side
  // wait for a's release event), let the kernel run.
  const ::testing::AssertionResult evicted =
      wait_until([&] { return p.metrics().evictions > 0; }, "the fill evicting a");
  g.open();  // either way: the registration may be waiting for the kernel
  const tensor_handle r = get_or_die(registering, "register_resident");
  ASSERT_TRUE(evicted);
  compute.synchronize();
  EXPECT_EQ(*slot.value, checksum(ab.data(), ab.size()))
      << "the fill overwrote a while its kernel read it";
  EXPECT_EQ(device_checksum(p, *dev, r, compute, slot), checksum(rb.data(), rb.size()));
}

}  // namespace
}  // namespace htp::test
