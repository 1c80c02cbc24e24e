// Many host threads on one pager: acquire / verify / release of shared weights, private mutable
// tensors written and verified, prefetch hints, and releases handed to another thread. Every byte
// is checked on the device at every acquire and at the end.
#include "pager_fixture.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>

namespace htp::test {
namespace {

/// Releases handed over by workers, performed by one releaser thread (the "another thread" of a
/// real engine: e.g. a completion thread returning KV blocks).
struct release_queue {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<tensor_handle> items;
  bool done = false;
};

TEST(pager_threads, eight_threads_share_a_pager_and_lose_nothing) {
  auto dev = small_sim_device();
  auto c = small_pager_config(/*hbm_slabs=*/16, /*host_slabs=*/256);
  c.prefetch_lookahead = 2;
  pager p(*dev, c);
  constexpr int threads = 8;
  constexpr int ops_per_thread = 1500;
  std::vector<tensor_handle> weights;
  std::vector<std::uint64_t> weight_sums;
  for (int i = 0; i < 24; ++i) {
    const std::size_t n = (i % 3 == 0) ? 2 * slab : 5000 + static_cast<std::size_t>(i) * 997;
    const auto b = payload(n, 50 + i);
    weights.push_back(p.register_tensor("w" + std::to_string(i), n, tensor_kind::weight, b.data()));
    weight_sums.push_back(checksum(b.data(), n));
  }
  p.set_schedule(weights, true);

  release_queue rq;
  stream release_stream(*dev);
  std::thread releaser([&] {
    std::unique_lock lock(rq.mutex);
    for (;;) {
      rq.cv.wait(lock, [&] { return rq.done || !rq.items.empty(); });
      if (rq.items.empty()) return;
      auto h = rq.items.front();
      rq.items.pop_front();
      lock.unlock();
      p.release(h, release_stream);
      lock.lock();
    }
  });

  std::atomic<int> mismatches{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      stream compute(*dev);
      checksum_slot slot(*dev);
      // each thread owns two mutable tensors (its KV blocks)
      std::vector<tensor_handle> mine;
      std::vector<std::uint64_t> mine_sums;
      for (int k = 0; k < 2; ++k) {
        const std::size_t n =
            slab / 2 + static_cast<std::size_t>(t) * 100 + static_cast<std::size_t>(k);
        mine.push_back(p.register_tensor("kv", n, tensor_kind::mutable_state));
        std::vector<unsigned char> z(n, 0);
        mine_sums.push_back(checksum(z.data(), n));
      }
      for (int op = 0; op < ops_per_thread; ++op) {
        const auto r = rng() % 10;
        try {
          if (r < 5) {  // read a shared weight
            const std::size_t i = rng() % weights.size();
            const auto s = p.acquire(weights[i], compute);
            dev->checksum_async(s.data, s.bytes, slot.value, compute);
            compute.synchronize();
            if (*slot.value != weight_sums[i]) ++mismatches;
            if (r == 0) {  // a quarter-ish of releases from the releaser thread
              // the releaser's stream must not pass the kernel: order it after compute
              event done(*dev);
              done.record(compute);
              done.synchronize();
              std::lock_guard lock(rq.mutex);
              rq.items.push_back(weights[i]);
              rq.cv.notify_one();
            } else {
              p.release(weights[i], compute);
            }
          } else if (r < 8) {  // write and verify a private KV block
            const std::size_t k = rng() % 2;
            const auto s = p.acquire(mine[k], compute);
            dev->checksum_async(s.data, s.bytes, slot.value, compute);
            const std::uint64_t seed = rng();
            dev->fill_pattern_async(s.data, s.bytes, seed, compute);
            compute.synchronize();
            if (*slot.value != mine_sums[k]) ++mismatches;
            p.release(mine[k], compute, true);
            const auto b = payload(s.bytes, seed);
            mine_sums[k] = checksum(b.data(), b.size());
          } else {
            p.prefetch(weights[rng() % weights.size()]);
          }
        } catch (const out_of_memory&) {
          // every other thread may hold a tensor at once: legal, and nothing may be lost
        }
      }
      for (std::size_t k = 0; k < mine.size(); ++k) {
        std::vector<unsigned char> out(p.info(mine[k]).bytes);
        p.copy_to_host(mine[k], out.data());
        if (checksum(out.data(), out.size()) != mine_sums[k]) ++mismatches;
        p.unregister_tensor(mine[k]);
      }
    });
  }
  for (auto& th : pool) th.join();
  {
    std::lock_guard lock(rq.mutex);
    rq.done = true;
  }
  rq.cv.notify_all();
  releaser.join();
  EXPECT_EQ(mismatches.load(), 0);
  stream compute(*dev);
  checksum_slot slot(*dev);
  for (std::size_t i = 0; i < weights.size(); ++i) {
    EXPECT_EQ(p.info(weights[i]).pins, 0);
    EXPECT_EQ(device_checksum(p, *dev, weights[i], compute, slot), weight_sums[i]);
  }
  const auto m = p.metrics();
  EXPECT_EQ(m.acquires, m.hits + m.faults + m.degraded_acquires + m.failed_acquires + m.oom.thrown);
  EXPECT_GT(m.evictions, 0u);
}

}  // namespace
}  // namespace htp::test
