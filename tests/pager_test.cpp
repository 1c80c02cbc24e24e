// The pager, rule by rule, on the sim backend.
#include "deadline.hpp"
#include "pager_fixture.hpp"
#include "throws_naming.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <string>

namespace htp::test {
namespace {

class pager_test : public sim_pager_test {};

TEST_F(pager_test, a_fault_pages_the_bytes_in_and_a_second_acquire_hits) {
  pager p(*dev, small_pager_config(8));
  const auto bytes = payload(100'003, 1);
  auto h = p.register_tensor("w0", bytes.size(), tensor_kind::weight, bytes.data());
  EXPECT_EQ(p.info(h).where, residency::host);
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(bytes.data(), bytes.size()));
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(bytes.data(), bytes.size()));
  // The compute stream passed the copy on the device; the pager learns of it on its next look.
  p.synchronize();
  const auto m = p.metrics();
  EXPECT_EQ(m.acquires, 2u);
  EXPECT_EQ(m.faults, 1u);
  EXPECT_EQ(m.hits, 1u);
  EXPECT_EQ(m.page_in_bytes, bytes.size());
  EXPECT_EQ(p.info(h).where, residency::resident);
  EXPECT_EQ(m.fault_latency.count, 1u);
}

TEST_F(pager_test, acquire_with_wait_blocks_until_the_bytes_arrived) {
  pager p(*dev, small_pager_config(8));
  const auto bytes = payload(3 * slab + 5, 2);
  auto h = p.register_tensor("w", bytes.size(), tensor_kind::weight, bytes.data());
  p.acquire(h, compute, /*wait=*/true);
  EXPECT_EQ(p.info(h).where, residency::resident);
  EXPECT_FALSE(p.info(h).copy_in_flight);
  p.release(h, compute);
}

TEST_F(pager_test, zero_filled_registration) {
  pager p(*dev, small_pager_config(8));
  auto h = p.register_tensor("kv", 4096, tensor_kind::mutable_state);
  std::vector<unsigned char> zeros(4096, 0);
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(zeros.data(), zeros.size()));
}

TEST_F(pager_test, stale_null_and_unknown_handles_are_invalid_argument) {
  pager p(*dev, small_pager_config(8));
  auto h = p.register_tensor("w", 1000, tensor_kind::weight);
  p.unregister_tensor(h);
  EXPECT_THROW(p.acquire(h, compute), invalid_argument);
  EXPECT_THROW(p.release(h, compute), invalid_argument);
  EXPECT_THROW(p.prefetch(h), invalid_argument);
  EXPECT_THROW(p.unregister_tensor(h), invalid_argument);
  EXPECT_THROW(p.info(tensor_handle{}), invalid_argument);
  EXPECT_THROW(p.info(tensor_handle{99, 1}), invalid_argument);
  // The slot is reused with a new generation: the old handle stays stale.
  auto h2 = p.register_tensor("w2", 1000, tensor_kind::weight);
  EXPECT_EQ(h2.index, h.index);
  EXPECT_NE(h2.generation, h.generation);
  EXPECT_THROW(p.acquire(h, compute), invalid_argument);
  EXPECT_NO_THROW(p.info(h2));
}

TEST_F(pager_test, a_handle_of_another_pager_is_refused_by_name) {
  pager a(*dev, small_pager_config(8));
  pager b(*dev, small_pager_config(8));
  const auto ha = a.register_tensor("a", 51203, tensor_kind::weight);
  const auto hb = b.register_tensor("b", 30720, tensor_kind::weight);
  ASSERT_EQ(ha.index, hb.index);  // the same slot and generation in both: only the owner differs
  ASSERT_EQ(ha.generation, hb.generation);
  try {
    (void)b.acquire(ha, compute);
    FAIL() << "pager b served pager a's handle";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("another pager"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.info(hb).pins, 0);
  EXPECT_THROW(b.unregister_tensor(ha), invalid_argument);
  EXPECT_NO_THROW(a.unregister_tensor(ha));
}

TEST_F(pager_test, a_write_released_on_one_stream_orders_an_acquire_on_another) {
  pager p(*dev, small_pager_config(8));
  const auto kv = p.register_tensor("kv", 4096, tensor_kind::mutable_state);
  stream a(*dev), b(*dev);
  (void)p.acquire(kv, a, /*wait=*/true);
  gate writing;  // stream a's kernel is still writing the tensor
  writing.hold(*dev, a);
  std::atomic<bool> written{false};
  std::atomic<int> seen{-1};
  dev->launch_host_func([&] { written = true; }, a);
  p.release(kv, a, /*dirty=*/true);
  (void)p.acquire(kv, b);  // resident: no copy intervenes, so only the pager can order b after a
  dev->launch_host_func([&] { seen = written ? 1 : 0; }, b);
  writing.open();
  b.synchronize();
  a.synchronize();
  EXPECT_EQ(seen.load(), 1) << "stream b read the tensor before stream a's write was done";
  p.release(kv, b);
}

TEST_F(pager_test, absurd_host_regions_are_refused) {
  pager p(*dev, small_pager_config(8));
  static char byte;
  EXPECT_THROW(p.add_host_region(&byte, SIZE_MAX, host_region_kind::pageable), invalid_argument);
  EXPECT_THROW(p.add_host_region(&byte, std::size_t{1} << 62, host_region_kind::pageable),
               invalid_argument);
  EXPECT_THROW(p.register_tensor_at("w", 4096, tensor_kind::weight, &byte), invalid_argument);
}

TEST_F(pager_test, release_errors_leave_state_unchanged) {
  pager p(*dev, small_pager_config(8));
  auto w = p.register_tensor("w", 1000, tensor_kind::weight);
  EXPECT_THROW(p.release(w, compute), invalid_argument);  // without acquire
  p.acquire(w, compute);
  EXPECT_THROW(p.release(w, compute, /*dirty=*/true), invalid_argument);  // weights are read-only
  EXPECT_EQ(p.info(w).pins, 1);
  EXPECT_FALSE(p.info(w).dirty);
  EXPECT_THROW(p.unregister_tensor(w), invalid_argument);  // still acquired
  p.release(w, compute);
  EXPECT_THROW(p.release(w, compute), invalid_argument);  // double release
  EXPECT_EQ(p.info(w).pins, 0);
  EXPECT_THROW(p.acquire(w, stream_ref{}), invalid_argument);
}

TEST_F(pager_test, a_per_thread_stream_handle_is_refused_and_changes_nothing) {
  // cudaStreamPerThread (2) is one handle for a stream per host thread: the release events and
  // checksum slots keyed by it would mix up threads, so sim refuses it as cuda does.
  pager p(*dev, small_pager_config(8));
  const auto bytes = payload(2 * slab, 4);
  auto w = p.register_tensor("w", bytes.size(), tensor_kind::weight, bytes.data());
  const stream_ref per_thread{reinterpret_cast<void*>(std::uintptr_t{2})};
  EXPECT_THROW(p.acquire(w, per_thread), invalid_argument);
  EXPECT_EQ(p.info(w).pins, 0);
  p.acquire(w, compute);
  EXPECT_THROW(p.release(w, per_thread), invalid_argument);
  EXPECT_EQ(p.info(w).pins, 1);
  p.release(w, compute);
  EXPECT_EQ(device_checksum(p, *dev, w, compute, slot), checksum(bytes.data(), bytes.size()));
}

TEST_F(pager_test, a_host_region_lent_as_pinned_must_be_pinned) {
  // Plain memory called pinned would make its copies synchronous on cuda (pageable); both
  // backends refuse it, and take pinned memory of the device (or of another device object).
  pager p(*dev, small_pager_config(8));
  std::vector<unsigned char> plain(4 * slab);
  EXPECT_THROW(p.add_host_region(plain.data(), plain.size(), host_region_kind::pinned),
               invalid_argument);
  void* pinned = dev->allocate(memory_kind::pinned_host, 4 * slab);
  p.add_host_region(pinned, 4 * slab, host_region_kind::pinned);
  const auto bytes = payload(3 * slab, 5);
  std::memcpy(pinned, bytes.data(), bytes.size());
  auto h = p.register_tensor_at("lent", bytes.size(), tensor_kind::weight, pinned);
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(bytes.data(), bytes.size()));
  p.unregister_tensor(h);
  p.remove_host_region(pinned);
  dev->deallocate(memory_kind::pinned_host, pinned, 4 * slab);
}

TEST_F(pager_test, bad_config_and_impossible_tensors_are_rejected) {
  auto c = small_pager_config(8);
  c.hbm_budget_bytes = slab - 1;
  EXPECT_THROW(pager(*dev, c), invalid_argument);
  c = small_pager_config(8);
  c.compaction_threshold = 0;
  EXPECT_THROW(pager(*dev, c), invalid_argument);
  pager p(*dev, small_pager_config(4));
  EXPECT_THROW(p.register_tensor("huge", 5 * slab, tensor_kind::weight), invalid_argument);
  EXPECT_THROW(p.register_tensor("empty", 0, tensor_kind::weight), invalid_argument);
}

TEST_F(pager_test, a_full_host_tier_is_out_of_memory_and_changes_nothing) {
  pager p(*dev, small_pager_config(4, /*host_slabs=*/4));
  auto a = p.register_tensor("a", 3 * slab, tensor_kind::weight);
  EXPECT_THROW(p.register_tensor("b", 2 * slab, tensor_kind::weight), out_of_memory);
  EXPECT_EQ(p.metrics().registered_tensors, 1u);
  EXPECT_EQ(p.metrics().host.used_bytes, 3 * slab);
  EXPECT_NO_THROW(p.info(a));
}

TEST_F(pager_test, clean_weights_are_evicted_when_hbm_is_full_and_come_back_intact) {
  pager p(*dev, small_pager_config(4));
  std::vector<tensor_handle> hs;
  std::vector<std::uint64_t> sums;
  for (int i = 0; i < 6; ++i) {
    const auto b = payload(slab, 100 + i);
    hs.push_back(
        p.register_tensor("layer" + std::to_string(i), b.size(), tensor_kind::weight, b.data()));
    sums.push_back(checksum(b.data(), b.size()));
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 6; ++i) {
      ASSERT_EQ(device_checksum(p, *dev, hs[i], compute, slot), sums[i])
          << "round " << round << " layer " << i;
    }
  }
  const auto m = p.metrics();
  EXPECT_GT(m.evictions, 0u);
  EXPECT_EQ(m.oom.evict_clean, m.evictions);
  EXPECT_EQ(m.write_backs, 0u);
  EXPECT_LE(m.hbm.used_bytes, 4 * slab);
}

TEST_F(pager_test, dirty_mutable_tensors_are_written_back_before_eviction) {
  pager p(*dev, small_pager_config(4));
  auto kv = p.register_tensor("kv", 2 * slab + 100, tensor_kind::mutable_state);
  auto s = p.acquire(kv, compute);
  dev->fill_pattern_async(s.data, s.bytes, 4242, compute);  // the kernel writes the KV block
  p.release(kv, compute, /*dirty=*/true);
  EXPECT_TRUE(p.info(kv).dirty);
  p.evict(kv);
  EXPECT_EQ(p.info(kv).where, residency::host);
  EXPECT_FALSE(p.info(kv).dirty);
  const auto want = payload(2 * slab + 100, 4242);
  std::vector<unsigned char> got(want.size());
  p.copy_to_host(kv, got.data());
  EXPECT_EQ(checksum(got.data(), got.size()), checksum(want.data(), want.size()));
  // And paged in again, the kernel sees what it wrote.
  EXPECT_EQ(device_checksum(p, *dev, kv, compute, slot), checksum(want.data(), want.size()));
  const auto m = p.metrics();
  EXPECT_EQ(m.write_backs, 1u);
  EXPECT_EQ(m.write_back_bytes, want.size());
}

TEST_F(pager_test, copy_to_host_reads_a_dirty_resident_tensor_from_hbm) {
  pager p(*dev, small_pager_config(4));
  auto kv = p.register_tensor("kv", 5000, tensor_kind::mutable_state);
  auto s = p.acquire(kv, compute);
  dev->fill_pattern_async(s.data, s.bytes, 77, compute);
  EXPECT_THROW(p.copy_to_host(kv, s.data), invalid_argument);  // being written
  p.release(kv, compute, true);
  std::vector<unsigned char> got(5000);
  p.copy_to_host(kv, got.data());
  const auto want = payload(5000, 77);
  EXPECT_EQ(got, want);
}

TEST_F(pager_test, memory_a_kernel_still_reads_is_reused_only_after_its_release_event) {
  pager p(*dev, small_pager_config(2));
  const auto ba = payload(2 * slab, 61);
  const auto bb = payload(2 * slab, 62);
  auto a = p.register_tensor("a", ba.size(), tensor_kind::weight, ba.data());
  auto b = p.register_tensor("b", bb.size(), tensor_kind::weight, bb.data());
  gate g;
  const auto sa = p.acquire(a, compute, /*wait=*/true);
  g.hold(*dev, compute);  // the kernel reading a has not run yet
  dev->checksum_async(sa.data, sa.bytes, slot.value, compute);
  p.release(a, compute);
  // b needs a's memory. Evicting a does not wait for the kernel on the host: b's copy into that
  // memory is ordered after a's release event on the device.
  p.prefetch(b);
  EXPECT_EQ(p.info(a).where, residency::host);
  EXPECT_TRUE(p.info(b).copy_in_flight);  // it cannot complete while the kernel is held
  g.open();
  compute.synchronize();
  EXPECT_EQ(*slot.value, checksum(ba.data(), ba.size())) << "the kernel read bytes of b";
  p.synchronize();
  EXPECT_EQ(p.info(b).where, residency::resident);
  EXPECT_EQ(device_checksum(p, *dev, b, compute, slot), checksum(bb.data(), bb.size()));
}

TEST_F(pager_test, a_prefetch_never_evicts_a_pinned_or_dirty_tensor) {
  pager p(*dev, small_pager_config(2));
  auto a = p.register_tensor("a", 2 * slab, tensor_kind::mutable_state);
  auto b = p.register_tensor("b", 2 * slab, tensor_kind::weight);
  p.acquire(a, compute, true);
  p.prefetch(b);  // a is pinned
  EXPECT_EQ(p.info(b).where, residency::host);
  p.release(a, compute, /*dirty=*/true);
  p.prefetch(b);  // a is dirty: a prefetch never pays for a write-back
  EXPECT_EQ(p.info(b).where, residency::host);
  EXPECT_EQ(p.info(a).where, residency::resident);
  EXPECT_EQ(p.metrics().prefetch_skipped, 2u);
  EXPECT_EQ(p.metrics().write_backs, 0u);
}

TEST_F(pager_test, pinned_tensors_are_never_evicted_and_the_ladder_ends_in_a_diagnostic) {
  pager p(*dev, small_pager_config(2));
  const auto ba = payload(2 * slab, 5);
  auto a = p.register_tensor("a", ba.size(), tensor_kind::weight, ba.data());
  auto b = p.register_tensor("b", 2 * slab, tensor_kind::weight);
  const auto sa = p.acquire(a, compute);
  try {
    p.acquire(b, compute);
    FAIL() << "acquired b although a pins all of HBM";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'b'"), std::string::npos) << m;
    EXPECT_NE(m.find("pinned by 1 acquired tensor"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free extent"), std::string::npos) << m;
    EXPECT_NE(m.find("allow_degraded"), std::string::npos) << m;
    EXPECT_EQ(e.requested_bytes(), 2 * slab);
  }
  EXPECT_EQ(p.info(b).where, residency::host);
  EXPECT_EQ(p.info(b).pins, 0);
  dev->checksum_async(sa.data, sa.bytes, slot.value, compute);
  p.release(a, compute);
  compute.synchronize();
  EXPECT_EQ(*slot.value, checksum(ba.data(), ba.size()));
  EXPECT_EQ(p.metrics().oom.thrown, 1u);
}

TEST_F(pager_test,
       a_small_tensor_kept_acquired_mid_hbm_splits_it_and_a_larger_acquire_fails_typed) {
  // docs/reliability.md, "The exact guarantee": out of memory when no free run of the size is left
  // between the acquired tensors, not only when they fill HBM. 16 slabs, one slab tensor in each;
  // the one in slab 8 leaves and a 1 KiB tensor takes its slab and stays acquired; 15 slabs can be
  // freed, but no run of 9.
  constexpr std::size_t slabs = 16, middle = 8;
  pager p(*dev, small_pager_config(slabs));
  std::vector<std::vector<unsigned char>> bytes;
  std::vector<tensor_handle> h;
  std::vector<std::uintptr_t> at;
  for (std::size_t i = 0; i < slabs; ++i) {
    bytes.push_back(payload(slab, 100 + i));
    h.push_back(
        p.register_tensor("s" + std::to_string(i), slab, tensor_kind::weight, bytes.back().data()));
    at.push_back(reinterpret_cast<std::uintptr_t>(p.acquire(h.back(), compute).data));
    p.release(h.back(), compute);
  }
  compute.synchronize();
  const auto lowest = *std::min_element(at.begin(), at.end());
  ASSERT_EQ(at[middle], lowest + middle * slab) << "the fill did not lay the slabs out in order";
  const auto small_bytes = payload(1 << 10, 7);
  const auto small =
      p.register_tensor("small", small_bytes.size(), tensor_kind::weight, small_bytes.data());
  p.evict(h[middle]);
  const auto s = p.acquire(small, compute);  // kept acquired until the end
  const auto small_at = reinterpret_cast<std::uintptr_t>(s.data);
  ASSERT_GE(small_at, at[middle]);
  ASSERT_LT(small_at, at[middle] + slab) << "the small tensor is not in the middle slab";
  const auto big_bytes = payload(9 * slab, 8);
  const auto big =
      p.register_tensor("big", big_bytes.size(), tensor_kind::weight, big_bytes.data());
  try {
    (void)p.acquire(big, compute);
    FAIL() << "9 slabs acquired although the small tensor leaves runs of 8 and 7";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.requested_bytes(), 9 * slab);
    EXPECT_NE(m.find("'big'"), std::string::npos) << m;
    EXPECT_NE(m.find("pinned by 1 acquired tensor(s): 1024 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free extent " + std::to_string(middle * slab) + " bytes"),
              std::string::npos)
        << m;
  }
  // Every other tensor was evicted on the way (15 of 16 slabs free), and nothing was lost.
  for (std::size_t i = 0; i < slabs; ++i) EXPECT_EQ(p.info(h[i]).where, residency::host) << i;
  EXPECT_EQ(p.info(big).where, residency::host);
  EXPECT_EQ(p.info(big).pins, 0);
  EXPECT_EQ(p.metrics().oom.thrown, 1u);
  dev->checksum_async(s.data, s.bytes, slot.value, compute);
  p.release(small, compute);
  compute.synchronize();
  EXPECT_EQ(*slot.value, checksum(small_bytes.data(), small_bytes.size()));
  // Released, the small tensor no longer splits HBM: the same acquire succeeds.
  EXPECT_EQ(device_checksum(p, *dev, big, compute, slot),
            checksum(big_bytes.data(), big_bytes.size()));
  for (std::size_t i = 0; i < slabs; ++i) {
    EXPECT_EQ(device_checksum(p, *dev, h[i], compute, slot),
              checksum(bytes[i].data(), bytes[i].size()))
        << i;
  }
}

TEST_F(pager_test, degraded_mode_serves_correct_bytes_from_host_memory) {
  auto c = small_pager_config(2);
  c.on_oom = oom_policy::allow_degraded;
  pager p(*dev, c);
  auto a = p.register_tensor("a", 2 * slab, tensor_kind::weight);
  const auto bb = payload(2 * slab, 9);
  auto b = p.register_tensor("b", bb.size(), tensor_kind::weight, bb.data());
  p.acquire(a, compute);
  const auto sb = p.acquire(b, compute);
  EXPECT_TRUE(sb.degraded);
  EXPECT_TRUE(p.info(b).degraded);
  dev->checksum_async(sb.data, sb.bytes, slot.value, compute);
  p.release(b, compute);
  p.release(a, compute);
  compute.synchronize();
  EXPECT_EQ(*slot.value, checksum(bb.data(), bb.size()));
  EXPECT_FALSE(p.info(b).degraded);
  const auto m = p.metrics();
  EXPECT_EQ(m.oom.degraded, 1u);
  EXPECT_EQ(m.degraded_acquires, 1u);
  // With a free, a normal acquire works again.
  EXPECT_EQ(device_checksum(p, *dev, b, compute, slot), checksum(bb.data(), bb.size()));
  p.synchronize();
  EXPECT_EQ(p.info(b).where, residency::resident);
}

TEST_F(pager_test, degraded_writes_land_in_the_authoritative_host_copy) {
  auto c = small_pager_config(1);
  c.on_oom = oom_policy::allow_degraded;
  pager p(*dev, c);
  auto a = p.register_tensor("a", slab, tensor_kind::weight);
  auto kv = p.register_tensor("kv", slab, tensor_kind::mutable_state);
  p.acquire(a, compute);
  const auto s = p.acquire(kv, compute);
  ASSERT_TRUE(s.degraded);
  dev->fill_pattern_async(s.data, s.bytes, 31337, compute);
  p.release(kv, compute, true);
  p.release(a, compute);
  const auto want = payload(slab, 31337);
  EXPECT_EQ(device_checksum(p, *dev, kv, compute, slot), checksum(want.data(), want.size()));
}

TEST_F(pager_test, a_page_in_waits_for_kernels_still_writing_the_host_copy) {
  // A tensor last used in degraded mode was written in host memory by kernels that may still be
  // running: paging it in must wait for them on the device, or it copies stale bytes.
  auto c = small_pager_config(1);
  c.on_oom = oom_policy::allow_degraded;
  pager p(*dev, c);
  auto a = p.register_tensor("a", slab, tensor_kind::weight);
  auto kv = p.register_tensor("kv", slab, tensor_kind::mutable_state);
  stream writer(*dev);
  p.acquire(a, compute, /*wait=*/true);
  const auto sk = p.acquire(kv, writer);
  ASSERT_TRUE(sk.degraded);
  gate g;
  g.hold(*dev, writer);
  dev->fill_pattern_async(sk.data, sk.bytes, 77, writer);  // runs only once the gate opens
  p.release(kv, writer, /*dirty=*/true);
  p.release(a, compute);
  compute.synchronize();                  // a's readers are done: only kv's writer is still pending
  const auto s = p.acquire(kv, compute);  // evicts a and pages kv in
  ASSERT_FALSE(s.degraded);
  dev->checksum_async(s.data, s.bytes, slot.value, compute);
  g.open();
  compute.synchronize();
  const auto want = payload(slab, 77);
  EXPECT_EQ(*slot.value, checksum(want.data(), want.size()));
  p.release(kv, compute);
}

TEST_F(pager_test, a_schedule_prefetches_ahead_and_counts_hits) {
  auto c = small_pager_config(8);
  c.prefetch_lookahead = 2;
  pager p(*dev, c);
  std::vector<tensor_handle> layers;
  for (int i = 0; i < 4; ++i)
    layers.push_back(p.register_tensor("l" + std::to_string(i), slab, tensor_kind::weight));
  p.set_schedule(layers, /*cyclic=*/true);  // prefetches the first two
  p.synchronize();
  EXPECT_EQ(p.info(layers[0]).where, residency::resident);
  EXPECT_EQ(p.info(layers[1]).where, residency::resident);
  EXPECT_EQ(p.info(layers[2]).where, residency::host);
  device_checksum(p, *dev, layers[0], compute, slot);  // hit; prefetches 1 (there) and 2
  p.synchronize();
  EXPECT_EQ(p.info(layers[2]).where, residency::resident);
  const auto m = p.metrics();
  EXPECT_EQ(m.faults, 0u);
  EXPECT_EQ(m.prefetch_hits, 1u);
  EXPECT_EQ(m.prefetches, 3u);
  EXPECT_THROW(p.set_schedule({layers[0], tensor_handle{77, 1}}, false), invalid_argument);
}

TEST_F(pager_test, compaction_makes_a_contiguous_run_and_moved_tensors_keep_their_bytes) {
  auto c = small_pager_config(8);
  c.auto_compact = false;
  pager p(*dev, c);
  std::vector<tensor_handle> hs;
  std::vector<std::uint64_t> sums;
  for (int i = 0; i < 8; ++i) {
    const auto b = payload(slab, 500 + i);
    hs.push_back(p.register_tensor("t" + std::to_string(i), slab, tensor_kind::weight, b.data()));
    sums.push_back(checksum(b.data(), b.size()));
    device_checksum(p, *dev, hs.back(), compute, slot);
  }
  // Keep the odd ones pinned so eviction alone cannot make a run of two; free the even ones.
  for (int i = 0; i < 8; i += 2) p.evict(hs[i]);
  std::vector<device_span> pinned;
  for (int i = 1; i < 8; i += 2) pinned.push_back(p.acquire(hs[i], compute));
  // Unpin two neighbours-to-be so the planner has something movable.
  p.release(hs[3], compute);
  p.release(hs[5], compute);
  compute.synchronize();
  const auto big = payload(2 * slab, 999);
  auto h = p.register_tensor("big", big.size(), tensor_kind::weight, big.data());
  EXPECT_EQ(device_checksum(p, *dev, h, compute, slot), checksum(big.data(), big.size()));
  const auto m = p.metrics();
  EXPECT_GE(m.compaction_moves, 1u);
  EXPECT_GE(m.oom.compact, 1u);
  p.release(hs[1], compute);
  p.release(hs[7], compute);
  for (int i = 1; i < 8; i += 2) {
    EXPECT_EQ(device_checksum(p, *dev, hs[i], compute, slot), sums[i]) << i;
  }
}

TEST_F(pager_test, explicit_compaction_keeps_every_byte) {
  auto c = small_pager_config(16);
  c.auto_compact = false;
  pager p(*dev, c);
  std::vector<tensor_handle> hs;
  std::vector<std::uint64_t> sums;
  for (int i = 0; i < 24; ++i) {
    const std::size_t n = 3000 + static_cast<std::size_t>(i) * 1500;  // bin-sized tensors
    const auto b = payload(n, 700 + i);
    hs.push_back(p.register_tensor("s" + std::to_string(i), n, tensor_kind::weight, b.data()));
    sums.push_back(checksum(b.data(), b.size()));
    device_checksum(p, *dev, hs.back(), compute, slot);
  }
  for (int i = 0; i < 24; i += 3) p.evict(hs[i]);
  const double before = p.metrics().hbm.fragmentation_pct;
  const std::size_t moves = p.compact();
  EXPECT_GT(moves, 0u);
  EXPECT_LE(p.metrics().hbm.fragmentation_pct, before);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(device_checksum(p, *dev, hs[i], compute, slot), sums[i]) << i;
}

TEST_F(pager_test, metrics_export_as_json_and_trace_as_chrome_json) {
  auto c = small_pager_config(4);
  c.trace = true;
  pager p(*dev, c);
  auto h = p.register_tensor("w", slab, tensor_kind::weight);
  device_checksum(p, *dev, h, compute, slot);
  const std::string j = to_json(p.metrics());
  for (const char* key : {"\"faults\"", "\"fault_rate_per_ms\"", "\"fault_latency\"", "\"hbm\"",
                          "\"oom_ladder\"", "\"transfers\"", "\"prefetch_hits\"", "\"mean_pct\""}) {
    EXPECT_NE(j.find(key), std::string::npos) << key;
  }
  const std::string path = ::testing::TempDir() + "htp_trace.json";
  p.write_trace(path);
  std::FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  EXPECT_NE(text.find("traceEvents"), std::string::npos);
  EXPECT_NE(text.find("prefetch stream"), std::string::npos);
  pager untraced(*dev, small_pager_config(2));
  EXPECT_THROW(untraced.write_trace(path), invalid_argument);
}

TEST_F(pager_test, a_trace_that_cannot_be_written_is_an_io_error_with_the_path_and_reason) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full here";
  auto c = small_pager_config(4);
  c.trace = true;
  pager p(*dev, c);
  auto h = p.register_tensor("w", slab, tensor_kind::weight);
  device_checksum(p, *dev, h, compute, slot);
  try {
    p.write_trace("/dev/full");  // opens, but every write fails with ENOSPC
    FAIL() << "writing to /dev/full succeeded";
  } catch (const io_error& e) {
    EXPECT_EQ(e.path(), "/dev/full");
    EXPECT_EQ(e.error_number(), ENOSPC) << e.what();
    EXPECT_NE(std::string(e.what()).find("write_trace"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(throws_naming<io_error>([&] { p.write_trace("/dev/full"); },
                                      {"'/dev/full'", std::strerror(ENOSPC)}));
}

TEST_F(pager_test, teardown_returns_every_byte_to_the_device) {
  const auto before = dev->memory().free_bytes;
  {
    pager p(*dev, small_pager_config(8));
    for (int i = 0; i < 5; ++i) {
      auto h = p.register_tensor("t", 3 * slab, tensor_kind::mutable_state);
      auto s = p.acquire(h, compute);
      dev->fill_pattern_async(s.data, s.bytes, i, compute);
      p.release(h, compute, true);
    }
  }
  EXPECT_EQ(dev->memory().free_bytes, before);
}

// Never block on a victim: a tensor acquired and released while its load is still in flight (the
// host ran ahead) is evicted at once for the next fault, the reuse of its memory ordered on the
// device after the load. With the load only partly issued (one chunk in flight), the next copy is
// held by the engine until the load is fully issued, else the device would deadlock: the copy's
// wait for the release event would sit on the prefetch stream ahead of the load's last chunks.
TEST(pager, a_victim_whose_load_is_in_flight_is_evicted_without_the_host_waiting) {
  auto dev = small_sim_device();
  auto c = small_pager_config(4);
  c.max_in_flight_chunks = 1;  // the load of a stays partly issued while the gate is closed
  c.auto_compact = false;
  pager p(*dev, c);
  stream compute(*dev);
  const auto a_bytes = payload(3 * slab, 1);
  const auto b_bytes = payload(3 * slab, 2);
  const auto a = p.register_tensor("a", a_bytes.size(), tensor_kind::weight, a_bytes.data());
  const auto b = p.register_tensor("b", b_bytes.size(), tensor_kind::weight, b_bytes.data());
  checksum_slot slot_a(*dev), slot_b(*dev);
  gate hold_copies;
  hold_copies.hold(*dev, p.engine().prefetch_stream());
  const device_span sa = p.acquire(a, compute);  // a's load: queued behind the gate
  dev->checksum_async(sa.data, sa.bytes, slot_a.value, compute);
  p.release(a, compute);
  ASSERT_EQ(p.info(a).where, residency::loading);
  // Only one of a and b fits: b's fault must evict a, whose load has not even started.
  auto fault = std::async(std::launch::async, [&] { return p.acquire(b, compute); });
  const bool returned = fault.wait_for(hang_limit) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the fault waited on the host for the victim's load";
  if (!returned) hold_copies.open();  // then the fault can return and the test end
  const device_span sb = get_or_die(fault, "the fault");
  EXPECT_EQ(p.info(a).where, residency::host);
  dev->checksum_async(sb.data, sb.bytes, slot_b.value, compute);
  p.release(b, compute);
  hold_copies.open();
  returns_or_die([&] { compute.synchronize(); }, "the compute stream draining (a device deadlock)");
  p.synchronize();
  EXPECT_EQ(*slot_a.value, checksum(a_bytes.data(), a_bytes.size())) << "a's kernel read a's bytes";
  EXPECT_EQ(*slot_b.value, checksum(b_bytes.data(), b_bytes.size())) << "b landed after a was read";
  const auto m = p.metrics();
  EXPECT_EQ(m.evictions_in_flight, 1u);
  EXPECT_EQ(m.host_blocked_ns, 0u);
  EXPECT_EQ(m.oom.wait_in_flight, 0u);
  EXPECT_EQ(m.failed_loads, 0u);
  EXPECT_EQ(m.fault_latency.count, 2u) << "the detached load still counts";
  // a comes back intact.
  EXPECT_EQ(device_checksum(p, *dev, a, compute, slot_a), checksum(a_bytes.data(), a_bytes.size()));
}

}  // namespace
}  // namespace htp::test
