// Stress: 8 threads x HTP_STRESS_OPS (default 10,000) operations on one pager: acquire
// (verified on the device), write, release, prefetch, register, unregister, with a quarter of the
// releases handed to another thread that orders them after the kernel on its own stream. Nothing
// may be lost, nothing may deadlock, and every byte goes back at the end.
#include "deadline.hpp"
#include "pager_fixture.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>

namespace htp::test {
namespace {

int stress_ops() {
  const char* v = std::getenv("HTP_STRESS_OPS");
  const int n = v ? std::atoi(v) : 0;
  return n > 0 ? n : 10000;
}

/// A release handed to the releaser thread: it waits for `done` on its stream, then releases.
struct handoff {
  tensor_handle h;
  std::shared_ptr<event> done;
  bool dirty = false;
};

struct release_queue {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<handoff> items;
  bool closing = false;
};

TEST(reliability_stress, eight_threads_ten_thousand_ops_each) {
  auto dev = small_sim_device();
  const std::size_t device_free = dev->memory().free_bytes;
  {
    auto c = small_pager_config(/*hbm_slabs=*/12, /*host_slabs=*/256);
    c.prefetch_lookahead = 2;
    pager p(*dev, c);
    constexpr int threads = 8;
    const int ops = stress_ops();
    std::vector<tensor_handle> weights;
    std::vector<std::uint64_t> weight_sums;
    for (int i = 0; i < 20; ++i) {
      const std::size_t n = (i % 4 == 0) ? slab + 1000 : 3000 + static_cast<std::size_t>(i) * 1531;
      const auto b = payload(n, 70 + i);
      weights.push_back(
          p.register_tensor("w" + std::to_string(i), n, tensor_kind::weight, b.data()));
      weight_sums.push_back(checksum(b.data(), n));
    }
    p.set_schedule(weights, true);

    release_queue rq;
    std::atomic<int> released_elsewhere{0};
    std::thread releaser([&] {
      stream s(*dev);
      std::unique_lock lock(rq.mutex);
      for (;;) {
        rq.cv.wait(lock, [&] { return rq.closing || !rq.items.empty(); });
        if (rq.items.empty()) return;
        handoff item = std::move(rq.items.front());
        rq.items.pop_front();
        lock.unlock();
        dev->wait(*item.done, s);  // the release point lies after the worker's kernel
        p.release(item.h, s, item.dirty);
        ++released_elsewhere;
        lock.lock();
      }
    });

    std::atomic<int> mismatches{0}, total_releases{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 7919 + 3);
        stream compute(*dev);
        checksum_slot slot(*dev);
        struct own {
          tensor_handle h;
          std::size_t bytes;
          std::uint64_t sum;
        };
        std::vector<own> mine;
        auto release = [&](tensor_handle h, bool dirty) {
          ++total_releases;
          if (rng() % 4 == 0) {  // a quarter of releases from the releaser thread
            auto done = std::make_shared<event>(*dev);
            done->record(compute);
            std::lock_guard lock(rq.mutex);
            rq.items.push_back({h, std::move(done), dirty});
            rq.cv.notify_one();
          } else {
            p.release(h, compute, dirty);
          }
        };
        for (int op = 0; op < ops; ++op) {
          const auto r = rng() % 100;
          try {
            if (r < 45) {  // read a shared weight on the device
              const std::size_t i = rng() % weights.size();
              const auto s = p.acquire(weights[i], compute);
              dev->checksum_async(s.data, s.bytes, slot.value, compute);
              compute.synchronize();
              if (*slot.value != weight_sums[i]) ++mismatches;
              release(weights[i], false);
            } else if (r < 75 && !mine.empty()) {  // verify and rewrite an own KV block
              auto& o = mine[rng() % mine.size()];
              const auto s = p.acquire(o.h, compute);
              dev->checksum_async(s.data, s.bytes, slot.value, compute);
              const std::uint64_t seed = rng();
              dev->fill_pattern_async(s.data, s.bytes, seed, compute);
              compute.synchronize();
              if (*slot.value != o.sum) ++mismatches;
              const auto b = payload(o.bytes, seed);
              o.sum = checksum(b.data(), b.size());
              release(o.h, true);
            } else if (r < 85) {
              p.prefetch(weights[rng() % weights.size()]);
            } else if (r < 93 || mine.empty()) {  // register an own block
              if (mine.size() >= 4) continue;
              const std::size_t n = 500 + rng() % (slab / 2);
              const std::uint64_t seed = rng();
              const auto b = payload(n, seed);
              mine.push_back({p.register_tensor("kv", n, tensor_kind::mutable_state, b.data()), n,
                              checksum(b.data(), n)});
            } else {  // unregister an own block (after a read back through the host path)
              const std::size_t k = rng() % mine.size();
              std::vector<unsigned char> out(mine[k].bytes);
              // A release handed off may still be pending: unregister refuses acquired tensors.
              if (p.info(mine[k].h).pins > 0) continue;
              p.copy_to_host(mine[k].h, out.data());
              if (checksum(out.data(), out.size()) != mine[k].sum) ++mismatches;
              p.unregister_tensor(mine[k].h);
              mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
            }
          } catch (const out_of_memory&) {
            // all eight threads may hold tensors at once: legal, nothing may be lost
          } catch (const invalid_argument&) {
            // a handed-off release still pending when unregister/copy_to_host ran: legal
          }
        }
        // Wait for this thread's handed-off releases, then check and drop what it owns. A release
        // the releaser never makes is a hang: its thread could not be joined.
        for (auto& o : mine) {
          wait_until_or_die([&] { return p.info(o.h).pins == 0; },
                            "the releaser thread releasing a handed-off KV block");
          std::vector<unsigned char> out(o.bytes);
          p.copy_to_host(o.h, out.data());
          if (checksum(out.data(), out.size()) != o.sum) ++mismatches;
          p.unregister_tensor(o.h);
        }
      });
    }
    for (auto& th : pool) th.join();
    {
      std::lock_guard lock(rq.mutex);
      rq.closing = true;
    }
    rq.cv.notify_all();
    releaser.join();
    EXPECT_EQ(mismatches.load(), 0);
    EXPECT_GT(released_elsewhere.load(), total_releases.load() / 5);  // ~ a quarter
    stream compute(*dev);
    checksum_slot slot(*dev);
    for (std::size_t i = 0; i < weights.size(); ++i) {
      EXPECT_EQ(p.info(weights[i]).pins, 0);
      EXPECT_EQ(device_checksum(p, *dev, weights[i], compute, slot), weight_sums[i]);
    }
    for (auto h : weights) p.unregister_tensor(h);
    const auto m = p.metrics();
    EXPECT_EQ(m.hbm.used_bytes, 0u);
    EXPECT_EQ(m.host.used_bytes, 0u);
    EXPECT_EQ(m.registered_tensors, 0u);
    EXPECT_GT(m.evictions, 0u);
    std::printf(
        "reliability_stress: %d threads x %d ops: %llu acquires, %llu faults, %llu evictions, "
        "%llu write-backs, %d releases (%d from the releaser)\n",
        threads, ops, static_cast<unsigned long long>(m.acquires),
        static_cast<unsigned long long>(m.faults), static_cast<unsigned long long>(m.evictions),
        static_cast<unsigned long long>(m.write_backs), total_releases.load(),
        released_elsewhere.load());
  }
  EXPECT_EQ(dev->memory().free_bytes, device_free);
}

}  // namespace
}  // namespace htp::test
