// The pager's headline metrics: page-fault waits (acquire call to bytes usable, late prefetches
// with their remaining wait, exact quantiles), host-blocked time, and reset_metrics() between
// warm-up and timed steps. Counts and bytes only: the waits' lengths belong in benchmarks.
#include "pager_fixture.hpp"

namespace htp::test {
namespace {

TEST(pager_metrics, every_fault_is_one_wait_sample_of_its_bytes_and_hits_are_none) {
  auto dev = small_sim_device();
  auto c = small_pager_config(8);
  pager p(*dev, c);
  stream compute(*dev);
  const auto a = p.register_tensor("a", 3 * slab, tensor_kind::weight);
  const auto b = p.register_tensor("b", slab / 2, tensor_kind::weight);
  {
    gate hold_copies;  // the copy cannot finish before acquire returns: the wait is not zero
    hold_copies.hold(*dev, p.engine().prefetch_stream());
    p.acquire(a, compute);
    p.release(a, compute);
    hold_copies.open();
  }
  p.acquire(b, compute, /*wait=*/true);
  p.release(b, compute);
  p.acquire(a, compute);  // a hit: no wait sample
  p.release(a, compute);
  compute.synchronize();
  p.synchronize();
  const auto m = p.metrics();
  EXPECT_EQ(m.faults, 2u);
  EXPECT_EQ(m.hits, 1u);
  EXPECT_EQ(m.fault_wait.count, 2u);
  EXPECT_EQ(m.fault_wait.bytes, 3 * slab + slab / 2);
  EXPECT_GT(m.fault_wait.max_ms, 0.0);
  EXPECT_LE(m.fault_wait.p50_ms, m.fault_wait.p99_ms);
  EXPECT_LE(m.fault_wait.p99_ms, m.fault_wait.max_ms);
  EXPECT_GT(m.fault_wait.floor_multiple_p99, 0.0);
  EXPECT_GT(m.host_blocked_ns, 0u) << "acquire(wait = true) blocked the host";
  EXPECT_NE(to_json(m).find("\"fault_wait\""), std::string::npos);
}

TEST(pager_metrics, a_late_prefetch_is_a_wait_sample_and_a_completed_one_is_not) {
  auto dev = small_sim_device();
  auto c = small_pager_config(8);
  c.prefetch_lookahead = 1;
  pager p(*dev, c);
  stream compute(*dev);
  std::vector<tensor_handle> hs;
  for (int i = 0; i < 3; ++i)
    hs.push_back(p.register_tensor("t" + std::to_string(i), slab, tensor_kind::weight));
  gate hold_copies;  // held before the schedule starts prefetching, so no copy lands early
  hold_copies.hold(*dev, p.engine().prefetch_stream());
  p.set_schedule(hs, /*cyclic=*/false);
  p.acquire(hs[0],
            compute);  // set_schedule prefetched t0 (held): a late prefetch; t1 queues behind
  p.release(hs[0], compute);
  p.acquire(hs[1], compute);  // t1 still queued behind the gate: a late prefetch
  p.release(hs[1], compute);
  hold_copies.open();
  compute.synchronize();
  p.synchronize();  // t2's prefetch has landed: its acquire is a prefetch hit
  p.acquire(hs[2], compute);
  p.release(hs[2], compute);
  compute.synchronize();
  const auto m = p.metrics();
  EXPECT_EQ(m.faults, 0u);
  EXPECT_EQ(m.late_prefetches, 2u);
  EXPECT_EQ(m.prefetch_hits, 1u);
  EXPECT_EQ(m.fault_wait.count, 2u) << "the two late prefetches, with their remaining waits";
  EXPECT_EQ(m.fault_wait.bytes, 2 * slab);
}

TEST(pager_metrics, reset_metrics_starts_counters_and_waits_afresh_but_keeps_residency) {
  auto dev = small_sim_device();
  pager p(*dev, small_pager_config(8));
  stream compute(*dev);
  const auto a = p.register_tensor("a", slab, tensor_kind::weight);
  const auto b = p.register_tensor("b", slab, tensor_kind::weight);
  p.acquire(a, compute, true);
  p.release(a, compute);
  compute.synchronize();
  p.synchronize();
  ASSERT_EQ(p.metrics().fault_wait.count, 1u);
  p.reset_metrics();
  auto m = p.metrics();
  EXPECT_EQ(m.faults, 0u);
  EXPECT_EQ(m.acquires, 0u);
  EXPECT_EQ(m.page_ins, 0u);
  EXPECT_EQ(m.fault_wait.count, 0u);
  EXPECT_EQ(m.host_blocked_ns, 0u);
  EXPECT_EQ(m.registered_tensors, 2u) << "a state, not a counter";
  EXPECT_GT(m.hbm.peak_pct, 0.0) << "a is still resident";
  p.acquire(a, compute);  // still resident: a hit
  p.release(a, compute);
  p.acquire(b, compute, true);
  p.release(b, compute);
  compute.synchronize();
  p.synchronize();
  m = p.metrics();
  EXPECT_EQ(m.hits, 1u);
  EXPECT_EQ(m.faults, 1u);
  EXPECT_EQ(m.fault_wait.count, 1u);
  EXPECT_EQ(m.acquires, m.hits + m.faults + m.degraded_acquires + m.failed_acquires + m.oom.thrown);
}

}  // namespace
}  // namespace htp::test
