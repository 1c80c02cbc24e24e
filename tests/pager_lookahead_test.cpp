// Automatic lookahead, routed groups (experts after their router) and the compute pace, on sim.
// Orders and residency are asserted right after the calls that decide them; no timing.
#include "pager_fixture.hpp"

#include "pager/compute_pace.hpp"
#include "pager/routed_groups.hpp"

#include <vector>

namespace htp::test {
namespace {

class pager_lookahead : public sim_pager_test {};

bool on_host(pager& p, tensor_handle h) { return p.info(h).where == residency::host; }

void touch(pager& p, tensor_handle h, stream_ref s) {
  p.acquire(h, s);
  p.release(h, s);
}

TEST_F(pager_lookahead, automatic_walks_past_resident_small_tensors_to_the_next_load) {
  for (lookahead_mode mode : {lookahead_mode::count, lookahead_mode::automatic}) {
    auto c = small_pager_config(8);
    c.lookahead = mode;
    pager p(*dev, c);
    std::vector<tensor_handle> norms;
    for (int i = 0; i < 3; ++i) {
      norms.push_back(p.register_tensor("norm" + std::to_string(i), 1024, tensor_kind::weight));
      touch(p, norms.back(), compute);  // resident now
    }
    const auto big = p.register_tensor("mlp", 60 << 10, tensor_kind::weight);
    p.synchronize();
    // Two tensors ahead are two resident norms: count mode loads nothing; automatic counts loads,
    // not positions, and reaches the matrix.
    p.set_schedule({norms[0], norms[1], norms[2], big}, /*cyclic=*/false);
    EXPECT_EQ(on_host(p, big), mode == lookahead_mode::count)
        << (mode == lookahead_mode::count ? "count" : "automatic");
    p.synchronize();
  }
}

/// A router and four experts of one slab each, in an HBM of four slabs (the router holds one; the
/// free bytes left can hold no expert, so making room is an eviction, never a compaction).
struct moe_setup {
  pager p;
  tensor_handle router;
  std::vector<tensor_handle> experts;
  moe_setup(device& dev, eviction_rule rule)
      : p(dev, [&] {
          auto c = small_pager_config(4);
          c.eviction = rule;
          return c;
        }()) {
    router = p.register_tensor("router", 1024, tensor_kind::weight);
    for (int e = 0; e < 4; ++e)
      experts.push_back(p.register_tensor("expert" + std::to_string(e), slab, tensor_kind::weight));
    p.set_schedule({router}, /*cyclic=*/true);
    p.set_routed_group(router, experts, 1);
  }
};

TEST_F(pager_lookahead, experts_are_evicted_least_popular_first_and_lru_differs) {
  for (eviction_rule rule : {eviction_rule::automatic, eviction_rule::lru}) {
    moe_setup m(*dev, rule);
    auto& e = m.experts;
    // Popularity: expert 2 three times, expert 1 twice, expert 0 once but last (most recent).
    for (int x : {1, 2, 2, 1, 2, 0}) touch(m.p, e[x], compute);
    m.p.synchronize();
    ASSERT_FALSE(on_host(m.p, e[0]) || on_host(m.p, e[1]) || on_host(m.p, e[2]));
    m.p.expect({e[3]});  // the router chose expert 3: HBM is full
    EXPECT_FALSE(on_host(m.p, e[3]));
    if (rule == eviction_rule::automatic) {
      EXPECT_TRUE(on_host(m.p, e[0])) << "the least popular expert makes room";
      EXPECT_FALSE(on_host(m.p, e[1]) || on_host(m.p, e[2]));
    } else {
      EXPECT_TRUE(on_host(m.p, e[1])) << "LRU evicts the least recently used";
      EXPECT_FALSE(on_host(m.p, e[0]) || on_host(m.p, e[2]));
    }
    EXPECT_FALSE(on_host(m.p, m.router)) << "a scheduled tensor is never an expert's victim";
    m.p.synchronize();
  }
}

TEST_F(pager_lookahead, passing_the_router_guesses_its_most_popular_expert) {
  moe_setup m(*dev, eviction_rule::automatic);
  auto& e = m.experts;
  for (int x : {3, 3, 1}) touch(m.p, e[x], compute);
  m.p.synchronize();
  for (auto h : e) m.p.evict(h);
  // The next acquire of the router walks the (cyclic) schedule past the router again: its group's
  // most popular member is loaded ahead of the router's choice.
  touch(m.p, m.router, compute);
  EXPECT_FALSE(on_host(m.p, e[3]));
  EXPECT_TRUE(on_host(m.p, e[0]) && on_host(m.p, e[1]) && on_host(m.p, e[2]));
  EXPECT_GE(m.p.metrics().prefetches, 1u);
  m.p.synchronize();
}

TEST_F(pager_lookahead, a_guess_never_evicts_another_expert) {
  moe_setup m(*dev, eviction_rule::automatic);
  auto& e = m.experts;
  for (int x : {3, 3, 3, 0, 1}) touch(m.p, e[x], compute);  // 3 is the favourite
  m.p.evict(e[3]);
  touch(m.p, e[2], compute);  // HBM holds the router and experts 0-2: full for an expert
  m.p.synchronize();
  ASSERT_TRUE(on_host(m.p, e[3]));
  ASSERT_FALSE(on_host(m.p, e[0]) || on_host(m.p, e[1]) || on_host(m.p, e[2]));
  touch(m.p, m.router, compute);  // the walk passes the router again and would guess expert 3
  EXPECT_TRUE(on_host(m.p, e[3])) << "no guess at the price of a less popular expert";
  EXPECT_FALSE(on_host(m.p, e[0]) || on_host(m.p, e[1]) || on_host(m.p, e[2]));
  m.p.expect({e[3]});  // the router's real choice does evict: the least popular
  EXPECT_FALSE(on_host(m.p, e[3]));
  EXPECT_TRUE(on_host(m.p, e[0]));
  m.p.synchronize();
}

TEST_F(pager_lookahead, routed_groups_refuse_bad_declarations) {
  moe_setup m(*dev, eviction_rule::automatic);
  auto& e = m.experts;
  const auto other = m.p.register_tensor("router2", 1024, tensor_kind::weight);
  EXPECT_THROW(m.p.set_routed_group(other, {e[0]}, 1), invalid_argument) << "in another group";
  EXPECT_THROW(m.p.set_routed_group(other, {other}, 1), invalid_argument) << "its own anchor";
  EXPECT_THROW(m.p.set_routed_group(e[0], {other}, 1), invalid_argument) << "anchor is a member";
  const auto x = m.p.register_tensor("x", 1024, tensor_kind::weight);
  EXPECT_THROW(m.p.set_routed_group(other, {x, x}, 1), invalid_argument) << "repeated";
  EXPECT_THROW(m.p.set_routed_group(other, {x}, 2), invalid_argument) << "k > members";
  EXPECT_THROW(m.p.set_routed_group(other, {x}, 0), invalid_argument) << "k = 0";
  m.p.set_routed_group(m.router, {}, 0);  // removing a group frees its members
  m.p.set_routed_group(other, {e[0], e[1]}, 2);
  m.p.unregister_tensor(e[0]);  // a member leaves its group with its tensor
  EXPECT_THROW(m.p.expect({e[0]}), invalid_argument) << "stale handle";
}

/// One prefetch whose acquire comes while its load is held at a gate, so the call is "late";
/// `compute_first` says whether the compute stream is held until after the load (then it never
/// waits) or reaches the acquire at once (then it waits for the whole modelled load, 1 ms).
pager_metrics late_prefetch_run(bool compute_first) {
  sim_config sc;
  sc.device_memory_bytes = 64 << 20;
  sc.pinned_memory_bytes = 128 << 20;
  sc.h2d_bytes_per_second = 1'000'000'000;  // a 1 MiB load takes 1 ms of modelled time
  auto dev = make_sim_device(sc);
  stream compute(*dev);
  auto c = small_pager_config(32);
  c.slab_bytes = 1 << 20;
  c.hbm_budget_bytes = 4 << 20;
  c.host_budget_bytes = 16 << 20;
  pager p(*dev, c);
  const auto t = p.register_tensor("w", 1 << 20, tensor_kind::weight);
  gate load_gate, compute_gate;
  load_gate.hold(*dev, p.engine().prefetch_stream());
  if (!compute_first) compute_gate.hold(*dev, compute);
  p.prefetch(t);
  p.acquire(t, compute);  // the load is held: a late prefetch by the host's clock
  p.release(t, compute);
  load_gate.open();
  p.synchronize();      // the load is done...
  compute_gate.open();  // ... before the held compute stream reaches the acquire
  compute.synchronize();
  return p.metrics();  // (reaps the probes)
}

TEST(prefetch_timeliness, is_measured_where_the_compute_stream_reaches_the_acquire) {
  const pager_metrics on_time = late_prefetch_run(/*compute_first=*/false);
  EXPECT_EQ(on_time.late_prefetches, 1u);
  EXPECT_EQ(on_time.prefetches_on_time, 1u) << "the GPU never waited";
  EXPECT_DOUBLE_EQ(on_time.prefetch_timely_share, 1.0);
  EXPECT_EQ(on_time.prefetch_lateness.count, 0u);
  const pager_metrics waited = late_prefetch_run(/*compute_first=*/true);
  EXPECT_EQ(waited.late_prefetches, 1u);
  EXPECT_EQ(waited.prefetches_on_time, 0u);
  EXPECT_DOUBLE_EQ(waited.prefetch_timely_share, 0.0);
  ASSERT_EQ(waited.prefetch_lateness.count, 1u);
  EXPECT_GE(waited.prefetch_lateness.max_ns, 1'000'000u) << "it waited for the modelled load";
}

TEST(routed_groups, popularity_decays_and_rescaling_keeps_the_order) {
  detail::routed_groups g(/*half_life=*/2);
  g.set(100, {1, 2, 3}, 2);
  for (int i = 0; i < 4; ++i) g.on_acquire(1);  // old favourite
  for (int i = 0; i < 3; ++i) g.on_acquire(2);  // recent, fewer acquires, but decay favours it
  EXPECT_GT(g.score(2), g.score(1));
  EXPECT_EQ(g.top(*g.after(100)), (std::vector<std::uint32_t>{2, 1}));
  bool rescaled = false;
  for (int i = 0; i < 2000 && !rescaled; ++i) rescaled = g.on_acquire(3);
  EXPECT_TRUE(rescaled) << "the inflation is bounded";
  EXPECT_GT(g.score(3), g.score(2));
  EXPECT_GE(g.score(2), g.score(1));
  EXPECT_EQ(g.forget_slot(3), (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(g.anchor_of(3), -1);
  EXPECT_EQ(g.forget_slot(100).size(), 2u);  // the anchor takes its group
  EXPECT_TRUE(g.empty());
}

TEST(compute_pace, a_gap_is_learned_from_device_marks_and_resampled) {
  auto dev = small_sim_device();
  stream s(*dev);
  void* h = dev->allocate(memory_kind::pinned_host, 1 << 20);
  void* d = dev->allocate(memory_kind::device, 1 << 20);
  {
    detail::compute_pace pace(*dev);
    pace.reset(2);
    EXPECT_FALSE(pace.mean_gap_ns().has_value());
    auto m0 = pace.plan(0, 1, /*cycle=*/0, s.ref());
    ASSERT_TRUE(m0.open) << "an unknown position is measured";
    EXPECT_FALSE(m0.close);
    dev->record(m0.open, s.ref());
    pace.recorded(m0, true);
    dev->copy_async(d, h, 1 << 20, copy_direction::host_to_device, s.ref());  // "compute"
    auto m1 = pace.plan(1, 1, 0, s.ref());
    ASSERT_TRUE(m1.close) << "the next position closes the measurement";
    dev->record(m1.close, s.ref());
    if (m1.open) dev->record(m1.open, s.ref());
    pace.recorded(m1, true);
    s.synchronize();
    pace.harvest();
    ASSERT_TRUE(pace.gap_ns(0).has_value());
    EXPECT_GT(*pace.gap_ns(0), 0);
    EXPECT_TRUE(pace.mean_gap_ns().has_value());
    // Known and measured this cycle: not again until resample_cycles later.
    auto m2 = pace.plan(0, 1, 1, s.ref());  // (position 1's measurement is dropped: not followed)
    EXPECT_FALSE(m2.open);
    auto m3 = pace.plan(0, 1, detail::compute_pace::resample_cycles, s.ref());
    EXPECT_TRUE(m3.open);
    pace.reset(3);
    EXPECT_FALSE(pace.gap_ns(0).has_value()) << "a new schedule starts unknown";
    s.synchronize();
  }
  dev->deallocate(memory_kind::device, d, 1 << 20);
  dev->deallocate(memory_kind::pinned_host, h, 1 << 20);
}

}  // namespace
}  // namespace htp::test
