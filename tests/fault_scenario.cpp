// The fixed fault-injection scenario. See fault_scenario.hpp.
#include "fault_scenario.hpp"

#include <htp/checksum.hpp>

namespace htp::test {

namespace {

std::uint64_t sum_of_pattern(std::size_t bytes, std::uint64_t seed) {
  const auto b = payload(bytes, seed);
  return checksum(b.data(), b.size());
}

}  // namespace

void fault_scenario::register_one(pager& p, std::size_t bytes, tensor_kind kind,
                                  std::uint64_t seed) {
  const auto b = payload(bytes, seed);
  const auto h = p.register_tensor("t" + std::to_string(seed), bytes, kind, b.data());
  live_.push_back({h, bytes, kind, checksum(b.data(), bytes)});
}

void fault_scenario::acquire_read(pager& p, std::size_t i) {
  auto& t = live_[i];
  const device_span s = p.acquire(t.h, *compute_, /*wait=*/true);
  held_.push_back({i, false, t.sum});
  inner_.checksum_async(s.data, s.bytes, slot_, *compute_);
  compute_->synchronize();
  EXPECT_EQ(*slot_, t.sum) << "tensor " << i << " read wrong bytes";
  p.release(t.h, *compute_);
  held_.pop_back();
}

void fault_scenario::acquire_write(pager& p, std::size_t i, std::uint64_t seed) {
  auto& t = live_[i];
  const device_span s = p.acquire(t.h, *compute_, /*wait=*/true);
  const std::uint64_t new_sum = sum_of_pattern(t.bytes, seed);
  held_.push_back({i, true, new_sum});
  inner_.checksum_async(s.data, s.bytes, slot_, *compute_);
  compute_->synchronize();
  EXPECT_EQ(*slot_, t.sum) << "tensor " << i << " read wrong bytes before the write";
  inner_.fill_pattern_async(s.data, s.bytes, seed, *compute_);
  p.release(t.h, *compute_, /*dirty=*/true);
  t.sum = new_sum;
  held_.pop_back();
}

void fault_scenario::step(pager& p, const std::function<void()>& op, const char* what) {
  try {
    op();
    return;
  } catch (const out_of_memory& e) {
    result_.errors.push_back(std::string(what) + ": " + e.what());
  } catch (const cuda_error& e) {
    ASSERT_FALSE(e.is_sticky()) << what << ": " << e.what();
    result_.errors.push_back(std::string(what) + ": " + e.what());
  } catch (const std::exception& e) {
    FAIL() << what << " threw an untyped or unexpected error: " << e.what();
  }
  ++result_.failures;
  fdev_.disarm();
  recover_and_verify(p);
  if (rearm_) {
    fault_plan next = *rearm_;
    next.seed += static_cast<std::uint64_t>(result_.failures);
    fdev_.set_plan(next);
  }
}

void fault_scenario::recover_and_verify(pager& p) {
  // Finish what the failed step left acquired, as a caller would: release it (again).
  while (!held_.empty()) {
    const hold h = held_.back();
    held_.pop_back();
    auto& t = live_[h.i];
    const int pins = p.info(t.h).pins;
    if (pins == 0) continue;  // the failing call undid its own pin
    try {
      p.release(t.h, *compute_, h.dirty);
      if (h.dirty) t.sum = h.new_sum;
    } catch (const cuda_error&) {
      // a page-in that failed after acquire: the release took effect, the host copy still holds
      ASSERT_EQ(p.info(t.h).pins, pins - 1);
    }
  }
  verify_all(p);
}

void fault_scenario::verify_all(pager& p) {
  p.synchronize();
  for (std::size_t i = 0; i < live_.size(); ++i) {
    const auto& t = live_[i];
    const tensor_info info = p.info(t.h);
    ASSERT_EQ(info.pins, 0) << "tensor " << i;
    std::vector<unsigned char> out(t.bytes);
    p.copy_to_host(t.h, out.data());
    ASSERT_EQ(checksum(out.data(), out.size()), t.sum)
        << "tensor " << i << " lost its bytes (" << to_string(info.where) << ")";
  }
  const auto m = p.metrics();
  ASSERT_LE(m.hbm.used_bytes, m.hbm.capacity_bytes);
  ASSERT_EQ(m.registered_tensors, live_.size());
  // Every acquire has exactly one outcome, failed ones included.
  ASSERT_EQ(m.acquires, m.hits + m.faults + m.degraded_acquires + m.failed_acquires + m.oom.thrown);
}

scenario_result fault_scenario::run(const fault_plan& plan, std::optional<fault_plan> rearm) {
  result_ = {};
  live_.clear();
  held_.clear();
  rearm_ = std::move(rearm);
  const std::size_t device_free = inner_.memory().free_bytes;
  compute_.emplace(inner_);
  slot_ = static_cast<std::uint64_t*>(inner_.allocate(memory_kind::pinned_host, 8));
  fdev_.set_plan(plan);
  {
    std::optional<pager> p;
    try {
      auto c = small_pager_config(/*hbm_slabs=*/4, /*host_slabs=*/32);
      c.checked = checked_;
      c.prefetch_lookahead = 1;
      p.emplace(fdev_, c);
      result_.constructed = true;
    } catch (const out_of_memory& e) {
      result_.errors.push_back(std::string("pager(): ") + e.what());
      ++result_.failures;
    } catch (const cuda_error& e) {
      result_.errors.push_back(std::string("pager(): ") + e.what());
      ++result_.failures;
    }
    if (p) {
      auto& pg = *p;
      // Weights and KV blocks: runs of whole slabs and size-class blocks; 7+ slabs of demand on
      // 4 slabs of HBM, so eviction, write-back and compaction all happen.
      const std::size_t sizes[] = {100 << 10, 40 << 10, 70 << 10, 20 << 10, 60 << 10, 30 << 10};
      for (std::size_t i = 0; i < 6; ++i) {
        step(
            pg,
            [&] {
              register_one(pg, sizes[i], i < 4 ? tensor_kind::weight : tensor_kind::mutable_state,
                           100 + i);
            },
            "register");
      }
      std::uint64_t seed = 1000;
      for (int round = 0; round < 2 && !::testing::Test::HasFatalFailure(); ++round) {
        for (std::size_t i = 0; i < live_.size(); ++i) {
          if (live_[i].kind == tensor_kind::mutable_state) {
            step(
                pg, [&] { acquire_write(pg, i, ++seed); }, "acquire+write");
          } else {
            step(
                pg, [&] { acquire_read(pg, i); }, "acquire");
          }
        }
        step(
            pg, [&] { pg.evict(live_[4].h); }, "evict dirty");
        step(
            pg,
            [&] {
              pg.prefetch(live_[0].h);
              pg.prefetch(live_[4].h);
            },
            "prefetch");
        step(
            pg, [&] { pg.compact(); }, "compact");
        step(
            pg,
            [&] {
              pg.set_schedule({live_[1].h, live_[2].h, live_[5].h}, true);
            },
            "schedule");
        step(
            pg, [&] { acquire_read(pg, 1); }, "acquire (scheduled)");
        step(
            pg, [&] { acquire_write(pg, 5, ++seed); }, "acquire+write (scheduled)");
        step(
            pg, [&] { pg.set_schedule({}, false); }, "clear schedule");
      }
      step(
          pg,
          [&] {
            pg.unregister_tensor(live_[3].h);
            live_.erase(live_.begin() + 3);
          },
          "unregister");
      step(
          pg, [&] { register_one(pg, 50 << 10, tensor_kind::mutable_state, 200); }, "register");
      step(
          pg, [&] { acquire_write(pg, live_.size() - 1, ++seed); }, "acquire+write new");
      fdev_.disarm();
      recover_and_verify(pg);
      // Nothing lost, also on the device path, then everything unregistered.
      for (std::size_t i = 0; i < live_.size() && !::testing::Test::HasFatalFailure(); ++i) {
        acquire_read(pg, i);
      }
      for (const auto& t : live_) pg.unregister_tensor(t.h);
      const auto m = pg.metrics();
      EXPECT_EQ(m.hbm.used_bytes, 0u);
      EXPECT_EQ(m.host.used_bytes, 0u);
    }
  }
  fdev_.disarm();
  // Every byte allocated through the wrapper came back, and the device's free memory too.
  EXPECT_EQ(fdev_.outstanding_bytes(memory_kind::device), 0u);
  EXPECT_EQ(fdev_.outstanding_bytes(memory_kind::pinned_host), 0u);
  inner_.deallocate(memory_kind::pinned_host, slot_, 8);
  compute_.reset();
  EXPECT_EQ(inner_.memory().free_bytes, device_free);
  return result_;
}

}  // namespace htp::test
