// A randomized test of the pager against a shadow model: a plain map from handle to the checksum
// its bytes must have. Every acquire verifies the bytes on the device (a checksum kernel on the
// compute stream); writes go through the device too. Operations: register, unregister, acquire
// (read), acquire + write + release dirty, hold (keep acquired across operations), prefetch, evict,
// compact, set_schedule. Nothing may be lost through eviction, write-back or compaction.
#include "pager_fixture.hpp"

#include <map>
#include <random>
#include <string>

namespace htp::test {
namespace {

struct shadow_tensor {
  tensor_handle h;
  std::size_t bytes;
  tensor_kind kind;
  std::uint64_t sum;  // checksum the bytes must have
};

/// `settled`: every copy completes before the next operation and automatic compaction is off (it
/// fires from whichever thread frees HBM), so only the pager's rules decide: two builds with the
/// same rules make the same decisions (scripts/decision-logs.sh compares them).
void run_shadow(std::uint64_t seed, int operations, bool checked, bool settled = false) {
  auto dev = small_sim_device();
  auto c = small_pager_config(/*hbm_slabs=*/24, /*host_slabs=*/400);
  c.checked = checked;
  if (settled) c.auto_compact = false;
  c.on_oom = (seed % 2) ? oom_policy::allow_degraded : oom_policy::throw_error;
  pager p(*dev, c);
  stream compute(*dev);
  checksum_slot slot(*dev);
  std::mt19937_64 rng(seed);
  std::vector<shadow_tensor> live;
  std::vector<std::pair<std::size_t, device_span>> held;  // index into live, span
  std::uint64_t next_seed = seed * 1000003;

  auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  };
  auto random_size = [&]() -> std::size_t {
    // log-uniform from 1 byte to 4 slabs: bins, runs, odd sizes
    const double e = std::uniform_real_distribution<double>(0, std::log2(4.0 * slab))(rng);
    return std::max<std::size_t>(1, static_cast<std::size_t>(std::exp2(e)));
  };
  auto is_held = [&](std::size_t i) {
    for (auto& [j, s] : held) {
      if (j == i) return true;
    }
    return false;
  };

  for (int op = 0; op < operations; ++op) {
    const int kind = static_cast<int>(pick(100));
    if (live.size() < 4 || (kind < 8 && live.size() < 60)) {  // register
      const std::size_t n = random_size();
      const auto b = payload(n, ++next_seed);
      const auto k = pick(2) ? tensor_kind::weight : tensor_kind::mutable_state;
      try {
        auto h = p.register_tensor("t" + std::to_string(op), n, k, b.data());
        live.push_back({h, n, k, checksum(b.data(), n)});
      } catch (const out_of_memory&) {
        // host tier full: fine, nothing changed
      }
    } else if (kind < 12) {  // unregister
      const std::size_t i = pick(live.size());
      if (is_held(i)) {
        ASSERT_THROW(p.unregister_tensor(live[i].h), invalid_argument);
        continue;
      }
      p.unregister_tensor(live[i].h);
      ASSERT_THROW(p.info(live[i].h), invalid_argument);
      // keep held indices valid: swap-remove only if the last one is not held
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      for (auto& [j, s] : held) {
        if (j > i) --j;
      }
    } else if (kind < 55) {  // acquire, verify, maybe write, release
      const std::size_t i = pick(live.size());
      auto& t = live[i];
      device_span s;
      try {
        s = p.acquire(t.h, compute);
      } catch (const out_of_memory&) {
        ASSERT_EQ(c.on_oom, oom_policy::throw_error);
        ASSERT_FALSE(held.empty()) << "out of memory with nothing pinned";
        continue;
      }
      dev->checksum_async(s.data, s.bytes, slot.value, compute);
      const bool write = t.kind == tensor_kind::mutable_state && pick(2) == 0;
      const std::uint64_t wseed = ++next_seed;
      if (write) dev->fill_pattern_async(s.data, s.bytes, wseed, compute);
      compute.synchronize();
      ASSERT_EQ(*slot.value, t.sum) << "seed " << seed << " op " << op << " tensor " << i
                                    << (s.degraded ? " (degraded)" : "");
      if (write) {
        const auto b = payload(t.bytes, wseed);
        t.sum = checksum(b.data(), b.size());
      }
      if (!is_held(i) && held.size() < 3 && pick(8) == 0 && !write) {
        held.emplace_back(i, s);  // keep it pinned for a while
      } else {
        p.release(t.h, compute, write);
      }
    } else if (kind < 62 && !held.empty()) {  // release a held tensor
      const std::size_t k = pick(held.size());
      p.release(live[held[k].first].h, compute);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (kind < 75) {  // prefetch
      p.prefetch(live[pick(live.size())].h);
    } else if (kind < 85) {  // evict
      const std::size_t i = pick(live.size());
      if (is_held(i)) {
        ASSERT_THROW(p.evict(live[i].h), invalid_argument);
      } else {
        p.evict(live[i].h);
        ASSERT_EQ(p.info(live[i].h).where, residency::host);
      }
    } else if (kind < 88) {  // compact
      p.compact();
    } else if (kind < 90) {  // schedule over a random subset
      std::vector<tensor_handle> seq;
      for (std::size_t j = 0; j < 8; ++j) seq.push_back(live[pick(live.size())].h);
      p.set_schedule(seq, pick(2) == 0);
    } else if (kind < 95 && !live.empty()) {  // read back through the host path
      const std::size_t i = pick(live.size());
      if (live[i].kind == tensor_kind::mutable_state && is_held(i)) continue;
      std::vector<unsigned char> out(live[i].bytes);
      p.copy_to_host(live[i].h, out.data());
      ASSERT_EQ(checksum(out.data(), out.size()), live[i].sum) << "seed " << seed << " op " << op;
    }
    if (settled) {
      compute.synchronize();
      p.synchronize();
    }
    // invariants after every operation
    const auto m = p.metrics();
    ASSERT_LE(m.hbm.used_bytes, m.hbm.capacity_bytes);
    ASSERT_EQ(m.registered_tensors, live.size());
  }
  for (auto& [i, s] : held) p.release(live[i].h, compute);
  compute.synchronize();
  // Nothing lost: every tensor's bytes, through the host path and on the device.
  for (const auto& t : live) {
    std::vector<unsigned char> out(t.bytes);
    p.copy_to_host(t.h, out.data());
    ASSERT_EQ(checksum(out.data(), out.size()), t.sum);
    ASSERT_EQ(device_checksum(p, *dev, t.h, compute, slot), t.sum);
  }
  for (const auto& t : live) p.unregister_tensor(t.h);
  const auto m = p.metrics();
  EXPECT_EQ(m.acquires, m.hits + m.faults + m.degraded_acquires + m.failed_acquires + m.oom.thrown);
  EXPECT_EQ(m.fault_latency.count, m.faults);
  EXPECT_EQ(m.hbm.used_bytes, 0u);
  EXPECT_EQ(m.host.used_bytes, 0u);
}

TEST(pager_shadow, seed_1_checked_mode) { run_shadow(1, 10000, true); }
TEST(pager_shadow, seed_2_checked_mode) { run_shadow(2, 10000, true); }
TEST(pager_shadow, seed_3_checked_mode) { run_shadow(3, 10000, true); }
TEST(pager_shadow, seed_4) { run_shadow(4, 10000, false); }
TEST(pager_shadow, seed_5_settled_checked_mode) { run_shadow(5, 10000, true, true); }
TEST(pager_shadow, seed_6_settled) { run_shadow(6, 10000, false, true); }

}  // namespace
}  // namespace htp::test
