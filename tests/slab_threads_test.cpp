// Eight threads allocate, stamp, hand allocations to each other and release them, some
// stream-ordered; nothing is handed out twice and the books balance at the end.
#include <htp/error.hpp>
#include <htp/sim_device.hpp>
#include <htp/slab_allocator.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace htp::test {
namespace {

TEST(slab_threads, eight_threads_with_frees_from_other_threads) {
  constexpr std::size_t slab = 64 * 1024;
  sim_config sc;
  sc.device_memory_bytes = std::size_t{32} << 20;
  auto dev = make_sim_device(sc);
  slab_allocator_config c;
  c.budget_bytes = 256 * slab;
  c.slab_bytes = slab;
  slab_allocator a(*dev, c);

  struct item {
    extent e;
    std::uint64_t stamp;
  };
  std::mutex pool_mu;
  std::vector<item> pool;  // allocations any thread may release
  std::atomic<int> corrupt{0};
  auto check = [&](const item& it) {
    std::uint64_t v = 0;
    std::memcpy(&v, it.e.ptr, 8);
    if (v != it.stamp) ++corrupt;
    if (it.e.bytes >= 16) {
      std::memcpy(&v, static_cast<char*>(it.e.ptr) + it.e.bytes - 8, 8);
      if (v != it.stamp) ++corrupt;
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 100);
      stream s(*dev);
      for (int i = 0; i < 3000; ++i) {
        const bool large = rng() % 10 == 0;
        const std::size_t n = large ? slab / 2 + rng() % (2 * slab) : 1 + rng() % 20000;
        try {
          extent e = a.allocate(n);
          const std::uint64_t stamp = (std::uint64_t(t) << 32) | std::uint64_t(i);
          std::memcpy(e.ptr, &stamp, 8);
          if (n >= 16) std::memcpy(static_cast<char*>(e.ptr) + n - 8, &stamp, 8);
          std::lock_guard lock(pool_mu);
          pool.push_back({e, stamp});
        } catch (const out_of_memory&) {
        }
        if (rng() % 2 == 0) {
          item it;
          {
            std::lock_guard lock(pool_mu);
            if (pool.empty()) continue;
            const std::size_t k = rng() % pool.size();
            it = pool[k];
            pool[k] = pool.back();
            pool.pop_back();
          }
          check(it);
          if (rng() % 4 == 0) {
            a.deallocate_after(it.e.ptr, it.e.bytes, s);
          } else {
            a.deallocate(it.e.ptr, it.e.bytes);
          }
        }
      }
      s.synchronize();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0) << "an allocation was handed out twice";
  for (const item& it : pool) {
    check(it);
    a.deallocate(it.e.ptr, it.e.bytes);
  }
  a.synchronize_pending();
  const auto st = a.statistics();
  EXPECT_EQ(st.bytes_in_use, 0u);
  EXPECT_EQ(st.live_allocations, 0u);
  EXPECT_EQ(st.allocations, st.deallocations);
  EXPECT_EQ(corrupt.load(), 0);
  a.audit();
}

}  // namespace
}  // namespace htp::test
