// What htp enqueues on a caller's stream while it holds a lock. On a GPU a stream's queue has a
// depth; an enqueue into a full queue blocks the calling thread. If that thread holds a lock the
// copy path needs, and the queue drains only once that copy runs, nothing moves again. The sim
// backend models the depth (sim_config::stream_queue_limit) so these tests can show it.
#include "deadline.hpp"
#include "pager_fixture.hpp"

#include <htp/sim_device.hpp>

#include <unistd.h>
#include <csignal>
#include <future>
#include <mutex>
#include <thread>

namespace htp::test {
namespace {

constexpr std::size_t queue_limit = 32;

std::unique_ptr<device> limited_sim_device() {
  sim_config c;
  c.device_memory_bytes = 64 << 20;
  c.pinned_memory_bytes = 128 << 20;
  c.stream_queue_limit = queue_limit;
  return make_sim_device(c);
}

// The hazard itself, with the sim's primitives: a thread holds the lock a "dispatcher" needs to
// write the value a parked stream waits for, and enqueues into that stream's full queue. This is
// the order acquire used before (wait_on's enqueue under the pager's and the engine's locks). It
// never returns: the child process is killed by its alarm.
TEST(queue_limit_death, enqueueing_into_a_full_queue_under_the_writers_lock_deadlocks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::alarm(3);
        auto dev = limited_sim_device();
        stream compute(*dev);
        auto* word = static_cast<std::uint32_t*>(dev->allocate(memory_kind::pinned_host, 4));
        dev->write_value(word, 0);
        std::mutex engine_lock;
        dev->wait_value_async(word, 1, compute);  // parked until the "copy" completes
        for (std::size_t i = 1; i < queue_limit; ++i) dev->launch_host_func([] {}, compute);
        std::unique_lock held(engine_lock);
        std::thread dispatcher([&] {
          std::lock_guard l(engine_lock);  // issuing the copy needs the lock
          dev->write_value(word, 1);
        });
        dev->launch_host_func([] {}, compute);  // the queue is full: blocks, holding the lock
        held.unlock();
        dispatcher.join();
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGALRM), "");
}

// The pager now enqueues every wait on the caller's stream after dropping its locks: a fault
// acquired while the compute stream's queue is full (parked behind a copy the dispatcher has yet to
// issue) returns once the queue drains.
TEST(queue_limit, acquire_into_a_full_compute_queue_does_not_deadlock) {
  auto dev = limited_sim_device();
  auto c = small_pager_config(8);
  c.max_in_flight_chunks = 1;  // the copy of A needs the dispatcher again after its first chunk
  pager p(*dev, c);
  stream compute(*dev);
  const auto a_bytes = payload(4 * slab, 1);
  const auto b_bytes = payload(slab, 2);
  const auto a = p.register_tensor("a", a_bytes.size(), tensor_kind::weight, a_bytes.data());
  const auto b = p.register_tensor("b", b_bytes.size(), tensor_kind::weight, b_bytes.data());
  gate hold_copies;
  hold_copies.hold(*dev, p.engine().prefetch_stream());  // A's chunks queue up behind this
  p.acquire(a, compute);                                 // compute now waits for A's copy
  for (std::size_t i = 1; i < queue_limit; ++i) dev->launch_host_func([] {}, compute);
  auto second = std::async(std::launch::async, [&] { return p.acquire(b, compute); });
  hold_copies.open();
  const device_span s = get_or_die(second, "acquire into a full compute queue (a deadlock)");
  EXPECT_EQ(s.bytes, b_bytes.size());
  p.release(a, compute);
  p.release(b, compute);
  compute.synchronize();
  checksum_slot slot(*dev);
  EXPECT_EQ(device_checksum(p, *dev, b, compute, slot), checksum(b_bytes.data(), b_bytes.size()));
}

// release records its event on the caller's stream outside the pager's lock: while one thread is
// stuck recording into a full compute queue, other threads' pager calls go on. (Before, release
// recorded under the lock, so the second acquire below waited until the queue drained.)
TEST(queue_limit, a_release_stuck_on_a_full_compute_queue_holds_no_pager_lock) {
  auto dev = limited_sim_device();
  auto c = small_pager_config(8);
  pager p(*dev, c);
  stream compute(*dev), other(*dev);
  const auto a_bytes = payload(2 * slab, 1);
  const auto b_bytes = payload(slab, 2);
  const auto c_bytes = payload(slab, 3);
  const auto a = p.register_tensor("a", a_bytes.size(), tensor_kind::weight, a_bytes.data());
  const auto b = p.register_tensor("b", b_bytes.size(), tensor_kind::weight, b_bytes.data());
  const auto t = p.register_tensor("c", c_bytes.size(), tensor_kind::weight, c_bytes.data());
  p.acquire(b, compute, /*wait=*/true);  // resident: its release below waits for nothing
  gate hold_copies;
  hold_copies.hold(*dev, p.engine().prefetch_stream());
  p.acquire(a, compute);  // compute parks on A's copy, which the gate holds back
  for (std::size_t i = 1; i < queue_limit; ++i) dev->launch_host_func([] {}, compute);
  auto releasing = std::async(std::launch::async, [&] { p.release(b, compute); });
  // Wait until the release is stuck in its enqueue: the queue is full until A arrives.
  const ::testing::AssertionResult stuck = wait_until(
      [&] { return sim_blocked_enqueues(*dev) > 0; }, "the release reaching the full queue");
  if (!stuck) {
    hold_copies.open();  // lets the release finish, so the test can end
    get_or_die(releasing, "the release");
  }
  ASSERT_TRUE(stuck);
  ASSERT_EQ(sim_blocked_enqueues(*dev), 1u);
  auto third = std::async(std::launch::async, [&] { return p.acquire(t, other); });
  const bool went_on = third.wait_for(hang_limit) == std::future_status::ready;
  EXPECT_TRUE(went_on) << "an acquire on another stream waited for a release stuck on a full queue";
  EXPECT_EQ(sim_blocked_enqueues(*dev), 1u)
      << "the release must still be stuck: the gate is closed";
  hold_copies.open();
  get_or_die(releasing, "the release, once the queue drained");
  const device_span s = get_or_die(third, "the acquire on another stream");
  EXPECT_EQ(s.bytes, c_bytes.size());
  p.release(a, compute);
  p.release(t, other);
  compute.synchronize();
  other.synchronize();
  checksum_slot slot(*dev);
  EXPECT_EQ(device_checksum(p, *dev, t, other, slot), checksum(c_bytes.data(), c_bytes.size()));
  EXPECT_EQ(device_checksum(p, *dev, b, compute, slot), checksum(b_bytes.data(), b_bytes.size()));
}

}  // namespace
}  // namespace htp::test
