// Randomized test of the slab allocator against a shadow model (a plain map of live extents),
// checked after every operation: no overlapping extents, exact byte accounting, fragmentation
// equal to a recomputation from the bitmaps, stamps intact through compaction moves.
#include <htp/error.hpp>
#include <htp/sim_device.hpp>
#include <htp/slab_allocator.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <tuple>
#include <vector>

namespace htp::test {
namespace {

constexpr std::size_t slab = 64 * 1024;

struct live_extent {
  std::size_t bytes;
  std::uint64_t stamp;
  bool pending;
};

class shadow_run {
 public:
  shadow_run(std::uint64_t seed, std::size_t page_bytes) : rng_(seed) {
    sim_config sc;
    sc.device_memory_bytes = std::size_t{16} << 20;
    dev_ = make_sim_device(sc);
    slab_allocator_config c;
    c.budget_bytes = 64 * slab;
    c.slab_bytes = slab;
    c.page_bytes = page_bytes;     // a slab, or 16 pages per slab
    c.slabs_per_reservation = 16;  // four reservations: runs must respect their boundaries
    alloc_ = std::make_unique<slab_allocator>(*dev_, c);
    s_ = std::make_unique<stream>(*dev_);
    close_gate();
  }
  ~shadow_run() {
    gate_.set_value();
    s_->synchronize();
  }

  void run(int ops) {
    for (int i = 0; i < ops; ++i) {
      step();
      check();
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) {
        FAIL() << "after operation " << i;
      }
    }
    const auto st = alloc_->statistics();
    EXPECT_GT(st.allocations, std::uint64_t(ops) / 4) << "the run did not exercise allocate";
    EXPECT_GT(st.moves_committed, 0u) << "the run did not exercise compaction";
    EXPECT_GT(st.failed_requests, 0u) << "the run never filled the tier";
    open_gate();
    for (auto& [p, e] : shadow_) alloc_->deallocate(reinterpret_cast<void*>(p), e.bytes);
    shadow_.clear();
    check();
  }

 private:
  void close_gate() {
    gate_ = std::promise<void>();
    std::shared_future<void> f = gate_.get_future().share();
    dev_->launch_host_func([f] { f.wait(); }, *s_);
  }
  void open_gate() {
    gate_.set_value();
    s_->synchronize();
    std::size_t pending = 0;
    for (auto it = shadow_.begin(); it != shadow_.end();) {
      if (it->second.pending) {
        ++pending;
        it = shadow_.erase(it);
      } else {
        ++it;
      }
    }
    const auto before = alloc_->statistics();  // statistics reaps too
    EXPECT_EQ(before.pending_releases, 0u);
    (void)pending;
    close_gate();
  }

  std::size_t random_size() {
    std::uniform_real_distribution<double> u(0, 1);
    if (u(rng_) < 0.7) return std::size_t(std::exp(u(rng_) * std::log(double(slab / 2)))) + 1;
    return slab / 2 + std::size_t(u(rng_) * double(4 * slab));
  }

  std::map<std::uintptr_t, live_extent>::iterator random_live(bool movable_only = false) {
    if (shadow_.empty()) return shadow_.end();
    auto it = shadow_.begin();
    std::advance(it, std::uniform_int_distribution<std::size_t>(0, shadow_.size() - 1)(rng_));
    if (movable_only && it->second.pending) return shadow_.end();
    return it;
  }

  // The first and last 8 bytes (or all of a shorter extent: a move copies only the requested
  // bytes).
  static void stamp(void* p, std::size_t bytes, std::uint64_t v) {
    std::memcpy(p, &v, std::min<std::size_t>(8, bytes));
    if (bytes >= 16) std::memcpy(static_cast<char*>(p) + bytes - 8, &v, 8);
  }
  static void expect_stamp(const void* p, std::size_t bytes, std::uint64_t v) {
    std::uint64_t a = 0, b = v, want = 0;
    std::memcpy(&a, p, std::min<std::size_t>(8, bytes));
    std::memcpy(&want, &v, std::min<std::size_t>(8, bytes));
    if (bytes >= 16) std::memcpy(&b, static_cast<const char*>(p) + bytes - 8, 8);
    EXPECT_EQ(a, want);
    EXPECT_EQ(b, v);
  }

  void insert(void* p, std::size_t bytes, std::uint64_t st, bool pending) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const std::size_t r = alloc_->rounded_size(bytes);
    auto next = shadow_.lower_bound(a);
    if (next != shadow_.end()) {
      ASSERT_LE(a + r, next->first) << "extent overlaps the next live extent";
    }
    if (next != shadow_.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + alloc_->rounded_size(prev->second.bytes), a)
          << "extent overlaps the previous live extent";
    }
    shadow_.emplace(a, live_extent{bytes, st, pending});
  }

  void step() {
    const int op = std::uniform_int_distribution<int>(0, 99)(rng_);
    if (op < 50) {
      const std::size_t n = random_size();
      const auto before = alloc_->statistics();
      try {
        extent e = alloc_->allocate(n);
        ASSERT_EQ(e.bytes, n);
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(e.ptr) % 256, 0u);
        stamp(e.ptr, n, ++stamps_);
        insert(e.ptr, n, stamps_, false);
      } catch (const out_of_memory&) {
        const auto after = alloc_->statistics();
        ASSERT_EQ(after.failed_requests, before.failed_requests + 1);
        ASSERT_EQ(after.bytes_in_use, before.bytes_in_use);
      }
    } else if (op < 85) {
      auto it = random_live(true);
      if (it == shadow_.end()) return;
      expect_stamp(reinterpret_cast<void*>(it->first), it->second.bytes, it->second.stamp);
      alloc_->deallocate(reinterpret_cast<void*>(it->first), it->second.bytes);
      shadow_.erase(it);
    } else if (op < 92) {
      auto it = random_live(true);
      if (it == shadow_.end()) return;
      alloc_->deallocate_after(reinterpret_cast<void*>(it->first), it->second.bytes, *s_);
      it->second.pending = true;
    } else if (op < 94) {
      open_gate();
    } else if (op < 97) {
      bad_call();
    } else {
      compact();
    }
  }

  void bad_call() {
    auto it = random_live();
    if (it == shadow_.end()) return;
    void* p = reinterpret_cast<void*>(it->first);
    const auto before = alloc_->statistics();
    switch (std::uniform_int_distribution<int>(0, 3)(rng_)) {
      case 0: EXPECT_THROW(alloc_->deallocate(p, it->second.bytes + 1), invalid_argument); break;
      case 1:
        EXPECT_THROW(alloc_->deallocate(static_cast<char*>(p) + 64, it->second.bytes),
                     invalid_argument);
        break;
      case 2: EXPECT_THROW(alloc_->allocate(0), invalid_argument); break;
      default:
        if (it->second.pending) {
          EXPECT_THROW(alloc_->deallocate(p, it->second.bytes), invalid_argument);
        } else {
          EXPECT_THROW(alloc_->allocate(alloc_->max_request_bytes() + 1), invalid_argument);
        }
    }
    const auto after = alloc_->statistics();
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
    EXPECT_EQ(after.live_allocations, before.live_allocations);
    EXPECT_EQ(after.free_pages, before.free_pages);
  }

  void compact() {
    const std::size_t request =
        std::uniform_int_distribution<int>(0, 1)(rng_) == 0 ? 0 : random_size();
    auto movable = [](const extent& e) {
      return (reinterpret_cast<std::uintptr_t>(e.ptr) >> 8) % 5 != 0;
    };
    compaction_plan p = alloc_->plan_compaction(movable, request);
    std::map<std::uintptr_t, std::size_t> dests;
    for (const slab_move& m : p.moves) {
      const auto from = reinterpret_cast<std::uintptr_t>(m.from.ptr);
      const auto to = reinterpret_cast<std::uintptr_t>(m.to.ptr);
      ASSERT_TRUE(movable(m.from)) << "planned to move an unmovable allocation";
      ASSERT_TRUE(shadow_.count(from) && !shadow_.at(from).pending) << "source is not live";
      ASSERT_EQ(shadow_.at(from).bytes, m.to.bytes);
      const std::size_t r = alloc_->rounded_size(m.to.bytes);
      auto next = shadow_.lower_bound(to);
      if (next != shadow_.end()) {
        ASSERT_LE(to + r, next->first) << "destination overlaps a live extent";
      }
      if (next != shadow_.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + alloc_->rounded_size(prev->second.bytes), to);
      }
      auto dn = dests.lower_bound(to);
      if (dn != dests.end()) {
        ASSERT_LE(to + r, dn->first) << "destinations overlap";
      }
      if (dn != dests.begin()) {
        ASSERT_LE(std::prev(dn)->first + std::prev(dn)->second, to);
      }
      dests.emplace(to, r);
    }
    const bool cancel_some = std::uniform_int_distribution<int>(0, 3)(rng_) == 0;
    for (std::size_t i = 0; i < p.moves.size(); ++i) {
      const slab_move& m = p.moves[i];
      if (cancel_some && i % 2 == 1) {
        alloc_->cancel_move(m);
        continue;
      }
      std::memcpy(m.to.ptr, m.from.ptr, m.from.bytes);
      alloc_->commit_move(m);
      auto node = shadow_.extract(reinterpret_cast<std::uintptr_t>(m.from.ptr));
      node.key() = reinterpret_cast<std::uintptr_t>(m.to.ptr);
      shadow_.insert(std::move(node));
      expect_stamp(m.to.ptr, m.to.bytes,
                   shadow_.at(reinterpret_cast<std::uintptr_t>(m.to.ptr)).stamp);
    }
    // A plan that says it makes room for the request does, once all its moves committed.
    if (request != 0 && p.satisfies_request && !(cancel_some && p.moves.size() > 1)) {
      extent e{};
      ASSERT_NO_THROW(e = alloc_->allocate(request))
          << "the plan promised room for " << request << " bytes";
      alloc_->deallocate(e.ptr, e.bytes);
    }
  }

  void check() {
    const auto st = alloc_->statistics();
    std::size_t bytes = 0, pending = 0;
    for (auto& [p, e] : shadow_) {
      bytes += e.bytes;
      pending += e.pending ? e.bytes : 0;
    }
    ASSERT_EQ(st.bytes_in_use, bytes);
    ASSERT_EQ(st.live_allocations, shadow_.size());
    ASSERT_EQ(st.pending_release_bytes, pending);
    ASSERT_EQ(st.move_destinations, 0u);
    const fragmentation_report f = alloc_->audit();  // throws logic_error on any disagreement
    ASSERT_EQ(f.external, st.fragmentation.external);
    ASSERT_EQ(f.internal, st.fragmentation.internal);
    ASSERT_EQ(f.combined, st.fragmentation.combined);
    ASSERT_EQ(f.waste, st.fragmentation.waste);
    ASSERT_EQ(f.largest_free_extent_bytes, st.fragmentation.largest_free_extent_bytes);
    ASSERT_EQ(f.free_pages, st.free_pages);
  }

  std::mt19937_64 rng_;
  std::unique_ptr<device> dev_;
  std::unique_ptr<slab_allocator> alloc_;
  std::unique_ptr<stream> s_;
  std::promise<void> gate_;
  std::map<std::uintptr_t, live_extent> shadow_;
  std::uint64_t stamps_ = 0;
};

/// (seed, page_bytes): pages as large as a slab (whole-slab runs, one class per slab) and pages of
/// 4 KiB (runs of pages inside slabs, bins of one page).
class slab_random : public ::testing::TestWithParam<std::tuple<std::uint64_t, std::size_t>> {};

TEST_P(slab_random, matches_the_shadow_model_after_every_operation) {
  shadow_run r(std::get<0>(GetParam()), std::get<1>(GetParam()));
  r.run(20000);
}

INSTANTIATE_TEST_SUITE_P(seeds, slab_random,
                         ::testing::Combine(::testing::Values(1u, 2u, 3u, 42u),
                                            ::testing::Values(slab, std::size_t{4096})));

}  // namespace
}  // namespace htp::test
