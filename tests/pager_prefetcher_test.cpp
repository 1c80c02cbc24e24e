// The prefetcher alone (src/pager/prefetcher.hpp): its invariants, each against the components
// wired without a pager (pager_components.hpp).
#include "pager_components.hpp"

namespace htp::test {
namespace {

pager_config config_of(std::size_t hbm_slabs, unsigned lookahead) {
  pager_config c = small_pager_config(hbm_slabs);
  c.eviction = eviction_rule::belady;
  c.prefetch_lookahead = lookahead;
  c.auto_compact = false;
  return c;
}

TEST(prefetcher, an_access_counts_once_per_run_of_overlapping_pins) {
  components c(config_of(4, 0));
  const std::uint32_t a = c.add("a", slab), b = c.add("b", slab);
  c.prefetch.set_schedule({a, b}, /*cyclic=*/false, c.room);
  c.load(a);
  const tensor_handle h = c.tensors.handle_of(a);
  c.tensors.pin(a);
  c.prefetch.accessed(&h, 1);
  c.tensors.pin(a);  // a second acquire while the first holds it: the same access
  c.prefetch.accessed(&h, 1);
  EXPECT_EQ(c.prefetch.future().schedule.upcoming_at(0), b);
  EXPECT_EQ(c.prefetch.future().schedule.remaining(), 1u);
  c.release(a);
  c.release(a);
  c.compute.synchronize();
  c.reap();
  c.tensors.pin(a);  // pins dropped to 0 in between: a new access (a is not scheduled again)
  c.prefetch.accessed(&h, 1);
  EXPECT_EQ(c.prefetch.future().schedule.remaining(), 1u);
  c.release(a);
}

TEST(prefetcher, a_prefetch_without_room_is_skipped_told_and_never_blocks_or_throws) {
  components c(config_of(2, 0));
  const std::uint32_t a = c.add("a", slab), b = c.add("b", slab), d = c.add("c", slab);
  for (std::uint32_t s : {a, b}) {
    c.load(s);
    c.tensors.pin(s);
  }
  EXPECT_FALSE(c.prefetch.prefetch(d, c.room));
  EXPECT_TRUE(c.seen.saw("prefetch skipped c"));
  EXPECT_EQ(c.tensors[d].where, residency::host);
  for (std::uint32_t s : {a, b}) c.release(s);
  // Room now: the hint is issued, and a tensor there or coming counts as done.
  c.compute.synchronize();
  c.reap();
  c.prefetch.set_schedule({d, a, b}, false, c.room);  // c first: evicting b (used last) is allowed
  EXPECT_TRUE(c.prefetch.prefetch(d, c.room));
  EXPECT_NE(c.tensors[d].where, residency::host);
  EXPECT_TRUE(c.seen.saw("evict b clean prefetch"));
  EXPECT_TRUE(c.seen.saw("load c prefetch"));
  EXPECT_TRUE(c.prefetch.prefetch(d, c.room));  // there or coming: done
}

TEST(prefetcher, the_walk_stops_at_the_first_tensor_it_cannot_bring_in) {
  // 3 slabs: a is pinned, so 2 are free; "big" needs 3, "small" 1. A walk that skipped big would
  // take room big needs first; it stops there instead.
  components c(config_of(3, 3));
  const std::uint32_t a = c.add("a", slab), big = c.add("big", 3 * slab),
                      small = c.add("small", slab);
  c.load(a);
  c.tensors.pin(a);
  c.prefetch.set_schedule({a, big, small}, false, c.room);
  EXPECT_EQ(c.tensors[big].where, residency::host);
  EXPECT_EQ(c.tensors[small].where, residency::host);
  EXPECT_FALSE(c.seen.saw("load small prefetch"));
  c.release(a);
}

TEST(prefetcher, the_victim_index_follows_the_forecast) {
  components c(config_of(4, 0));
  std::vector<std::uint32_t> t;
  for (const char* n : {"a", "b", "c"}) {
    t.push_back(c.add(n, slab));
    c.use(t.back());
  }
  c.prefetch.set_schedule({t[2], t[0]}, false, c.room);
  const auto& schedule = c.prefetch.future().schedule;
  for (std::uint32_t s : t) {  // invariant 4: keyed by the new schedule before anything else
    EXPECT_EQ(c.tensors.victims().key_of(s).next_use, schedule.next_use(s)) << c.tensors[s].name;
  }
  c.prefetch.forget(t[2]);  // unregistering a scheduled tensor shifts the positions
  EXPECT_EQ(c.tensors.victims().key_of(t[0]).next_use, schedule.next_use(t[0]));
}

}  // namespace
}  // namespace htp::test
