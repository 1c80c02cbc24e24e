// The room maker alone (src/pager/room_maker.hpp): its invariants, each against the components
// wired without a pager (pager_components.hpp). A 4-slab HBM of 64 KiB slabs; tensors of one
// slab, so each eviction makes room for exactly one tensor.
#include "pager_components.hpp"

namespace htp::test {
namespace {

pager_config four_slabs(eviction_rule rule = eviction_rule::lru) {
  pager_config c = small_pager_config(/*hbm_slabs=*/4);
  c.eviction = rule;
  c.auto_compact = false;
  c.prefetch_lookahead = 0;  // nothing loads but what a test asks for
  return c;
}

TEST(room_maker, a_demand_evicts_the_least_recently_used_clean_tensor_first) {
  components c(four_slabs());
  std::vector<std::uint32_t> t;
  for (const char* n : {"a", "b", "c", "d", "e"}) t.push_back(c.add(n, slab));
  for (int i : {0, 1, 2, 3}) c.use(t[i]);
  c.use(t[0]);  // a is now the most recent
  c.seen.seen.clear();
  c.load(t[4]);
  EXPECT_TRUE(c.seen.saw("evict b clean demand"));
  EXPECT_EQ(c.tensors[t[1]].where, residency::host);
  EXPECT_EQ(c.tensors[t[0]].where, residency::resident);
  EXPECT_EQ(c.room.held_bytes(), c.bytes_held_by_tensors());  // invariant 1
}

TEST(room_maker, a_dirty_victim_is_written_back_and_waited_for_and_a_pinned_one_never_goes) {
  components c(four_slabs());
  std::vector<std::uint32_t> t;
  for (const char* n : {"a", "b", "c", "d", "e"})
    t.push_back(c.add(n, slab, tensor_kind::mutable_state));
  c.use(t[0], /*dirty=*/true);  // the least recent, and dirty
  for (int i : {1, 2, 3}) {
    c.load(t[i]);
    c.tensors.pin(t[i]);  // held by a kernel: never a victim
  }
  detail::demand_result r = c.room.for_demand(slab, true, false);
  ASSERT_FALSE(r.room.has_value());
  ASSERT_EQ(r.waits.tickets.size(), 1u);  // the write-back of a, rung 2
  EXPECT_TRUE(c.seen.saw("evict a write-back demand"));
  c.tiers.engine->wait(r.waits.tickets[0]);
  c.reap();
  r = c.room.for_demand(slab, true, false);
  ASSERT_TRUE(r.room.has_value());
  c.room.free_hbm(*r.room);
  for (int i : {1, 2, 3}) EXPECT_EQ(c.tensors[t[i]].where, residency::resident);
  for (int i : {1, 2, 3}) c.release(t[i]);
}

TEST(room_maker, with_everything_pinned_the_ladder_is_exhausted_or_serves_degraded) {
  for (const bool degrade : {false, true}) {
    pager_config cfg = four_slabs();
    if (degrade) cfg.on_oom = oom_policy::allow_degraded;
    components c(cfg);
    std::vector<std::uint32_t> t;
    for (const char* n : {"a", "b", "c", "d", "e"}) t.push_back(c.add(n, slab));
    for (int i : {0, 1, 2, 3}) {
      c.load(t[i]);
      c.tensors.pin(t[i]);
    }
    const detail::demand_result r = c.room.for_demand(slab, true, /*may_degrade=*/true);
    EXPECT_FALSE(r.room.has_value());
    EXPECT_EQ(r.degraded, degrade);
    EXPECT_EQ(r.exhausted(), !degrade);
    EXPECT_EQ(c.seen.saw("ladder exhausted"), !degrade);  // told once, at the decision
    for (int i : {0, 1, 2, 3}) c.release(t[i]);
  }
}

TEST(room_maker, freed_memory_stays_fenced_until_its_readers_finish) {
  components c(four_slabs());
  const std::uint32_t a = c.add("a", slab), b = c.add("b", slab);
  for (const char* n : {"c", "d", "e"}) c.load(c.add(n, slab));
  c.load(a);  // HBM full
  c.tensors.pin(a);
  gate g;
  g.hold(*c.dev, c.compute);  // a kernel still reading a
  c.release(a);
  c.reap();
  ASSERT_TRUE(c.tensors.can_evict(a));
  const extent was = *c.tensors[a].hbm;
  c.room.evict(a, detail::cause::request);
  EXPECT_EQ(c.tensors[a].where, residency::host);
  EXPECT_FALSE(c.room.fence_events(was).empty());  // invariant 2: the next user waits for it
  // b lands in a's memory, the only free slab, and its load waits for the kernel.
  const detail::demand_result r = c.room.for_demand(slab, true, false);
  ASSERT_TRUE(r.room.has_value());
  EXPECT_EQ(r.room->ptr, was.ptr);
  c.room.load(b, *r.room, transfer_priority::fault);
  EXPECT_FALSE(c.tiers.engine->is_complete(c.tensors[b].ticket));  // behind the kernel
  g.open();
  c.tiers.engine->wait(c.tensors[b].ticket);
  c.compute.synchronize();
  c.reap();
  EXPECT_EQ(c.tensors[b].where, residency::resident);
  EXPECT_TRUE(c.room.fence_events(was).empty());  // dropped once its readers finished
}

TEST(room_maker, held_bytes_follow_every_load_eviction_and_compaction) {
  pager_config cfg = small_pager_config(/*hbm_slabs=*/2);
  cfg.auto_compact = false;
  cfg.prefetch_lookahead = 0;
  components c(cfg);
  std::vector<std::uint32_t> t;
  const std::size_t sizes[] = {20 << 10, 40 << 10, 8 << 10, 30 << 10, 50 << 10, 12 << 10};
  for (int i = 0; i < 6; ++i) t.push_back(c.add("t" + std::to_string(i), sizes[i]));
  std::uint64_t x = 7;
  for (int step = 0; step < 200; ++step) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const std::uint32_t s = t[(x >> 33) % t.size()];
    switch ((x >> 20) % 3) {
      case 0: c.use(s); break;
      case 1:
        if (c.tensors.can_evict(s)) c.room.evict(s, detail::cause::request);
        break;
      case 2: {
        c.room.compact(0, detail::cause::request);
        detail::wait_set w;
        c.room.add_move_waits(w);
        for (transfer_ticket k : w.tickets) c.tiers.engine->wait(k);
        break;
      }
    }
    ASSERT_EQ(c.room.held_bytes(), c.bytes_held_by_tensors()) << "step " << step;  // invariant 1
    c.reap();
    ASSERT_EQ(c.room.moves_in_flight(), 0u);  // invariant 5, once every move completed
  }
}

TEST(room_maker, a_prefetch_never_evicts_what_is_needed_before_the_tensor_it_brings_in) {
  pager_config cfg = small_pager_config(/*hbm_slabs=*/2);
  cfg.eviction = eviction_rule::belady;
  cfg.prefetch = prefetch_mode::min_page_ins;
  cfg.prefetch_lookahead = 0;
  components c(cfg);
  const std::uint32_t a = c.add("a", slab), b = c.add("b", slab), d = c.add("c", slab);
  c.use(a);
  c.use(b);
  c.prefetch.set_schedule({a, b, d, a, b}, /*cyclic=*/false, c.room);
  // b is needed (at 1) before c (at 2): the fault of c would evict b, so no prefetch now.
  EXPECT_FALSE(c.room.for_prefetch(d).has_value());
  EXPECT_EQ(c.tensors[a].where, residency::resident);
  EXPECT_EQ(c.tensors[b].where, residency::resident);
  // After a and b are used, c's fault would evict b (next use 4, after a's 3): so may a prefetch.
  const tensor_handle used[] = {c.tensors.handle_of(a), c.tensors.handle_of(b)};
  for (const tensor_handle& h : used) {
    c.tensors.pin(h.index);
    c.prefetch.accessed(&h, 1);
    c.release(h.index);
  }
  c.compute.synchronize();
  c.reap();
  const auto room = c.room.for_prefetch(d);
  ASSERT_TRUE(room.has_value());
  EXPECT_TRUE(c.seen.saw("evict b clean prefetch"));
  c.room.free_hbm(*room);
}

}  // namespace
}  // namespace htp::test
