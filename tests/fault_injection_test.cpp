// Fault injection: the fault-injecting device itself, a sweep that fails each call site
// of a fixed pager scenario in turn (k = 1, 2, ... per kind of call) checking the strong guarantee
// every time, and soak runs failing calls at seeded rates of 0.1 %, 1 % and 10 %.
#include "fault_scenario.hpp"

#include <htp/fault_injecting_device.hpp>

#include <cstdlib>

namespace htp::test {
namespace {

std::unique_ptr<device> bounded_sim() {
  sim_config c;
  c.device_memory_bytes = 8 << 20;
  c.pinned_memory_bytes = 16 << 20;
  return make_sim_device(c);
}

TEST(fault_injecting_device, fails_the_kth_selected_call_and_counts) {
  auto inner = bounded_sim();
  fault_injecting_device dev(*inner);
  fault_plan plan;
  plan.kinds = mask_of(fault_kind::device_allocation);
  plan.fail_at = 2;
  dev.set_plan(plan);
  void* a = dev.allocate(memory_kind::pinned_host, 256);                // not selected
  void* b = dev.allocate(memory_kind::device, 256);                     // selected call 1
  EXPECT_THROW(dev.allocate(memory_kind::device, 512), out_of_memory);  // selected call 2
  void* c = dev.allocate(memory_kind::device, 256);                     // selected call 3
  EXPECT_EQ(dev.calls(fault_kind::device_allocation), 3u);
  EXPECT_EQ(dev.injected(fault_kind::device_allocation), 1u);
  EXPECT_EQ(dev.outstanding_bytes(memory_kind::device), 512u);
  EXPECT_EQ(dev.outstanding_bytes(memory_kind::pinned_host), 256u);
  dev.deallocate(memory_kind::device, b, 256);
  dev.deallocate(memory_kind::device, c, 256);
  dev.deallocate(memory_kind::pinned_host, a, 256);
  EXPECT_EQ(dev.outstanding_bytes(memory_kind::device), 0u);
  EXPECT_EQ(inner->memory().free_bytes, inner->memory().total_bytes);
}

TEST(fault_injecting_device, other_calls_throw_a_recognisable_cuda_error) {
  auto inner = bounded_sim();
  fault_injecting_device dev(*inner);
  stream s(dev);
  event e(dev);
  fault_plan plan;
  plan.kinds = mask_of(fault_kind::event_record);
  plan.fail_at = 1;
  dev.set_plan(plan);
  try {
    dev.record(e, s);
    FAIL() << "record did not fail";
  } catch (const cuda_error& err) {
    EXPECT_EQ(err.name(), "injected_fault");
    EXPECT_FALSE(err.is_sticky());
  }
  EXPECT_TRUE(e.query());  // nothing was recorded
  dev.record(e, s);        // call 2 passes
  e.synchronize();
  EXPECT_THROW(dev.set_plan(fault_plan{all_fault_kinds, 0, 1.5, 0, false}), invalid_argument);
}

TEST(cuda_error, sticky_errors_are_recognised_by_runtime_and_driver_names) {
  // A stream memory operation (called through the driver) reports CUresult names; the runtime
  // reports cudaError_t names. Both must be recognised as corrupting the context.
  const auto named = [](int code, const char* name) {
    return cuda_error(code, name, "call", "f", 1, "d");
  };
  EXPECT_TRUE(named(700, "CUDA_ERROR_ILLEGAL_ADDRESS").is_sticky());
  EXPECT_TRUE(named(700, "cudaErrorIllegalAddress").is_sticky());
  EXPECT_TRUE(named(702, "CUDA_ERROR_LAUNCH_TIMEOUT").is_sticky());
  EXPECT_TRUE(named(719, "cudaErrorLaunchFailure").is_sticky());
  EXPECT_FALSE(named(1, "cudaErrorInvalidValue").is_sticky());
  EXPECT_FALSE(named(2, "CUDA_ERROR_OUT_OF_MEMORY").is_sticky());
}

TEST(fault_injecting_device, persistent_and_seeded_rates) {
  auto inner = bounded_sim();
  fault_injecting_device dev(*inner);
  stream s(dev);
  fault_plan plan;
  plan.kinds = mask_of(fault_kind::kernel);
  plan.fail_at = 2;
  plan.persistent = true;
  dev.set_plan(plan);
  dev.launch_host_func([] {}, s);
  for (int i = 0; i < 5; ++i) EXPECT_THROW(dev.launch_host_func([] {}, s), cuda_error);
  plan = {};
  plan.kinds = mask_of(fault_kind::kernel);
  plan.probability = 0.25;
  plan.seed = 7;
  dev.set_plan(plan);
  dev.reset_counters();
  int failed = 0;
  for (int i = 0; i < 4000; ++i) {
    try {
      dev.launch_host_func([] {}, s);
    } catch (const cuda_error&) {
      ++failed;
    }
  }
  EXPECT_EQ(static_cast<std::uint64_t>(failed), dev.injected(fault_kind::kernel));
  EXPECT_GT(failed, 800);  // ~1000 expected; deterministic for the seed
  EXPECT_LT(failed, 1200);
  s.synchronize();
}

/// Sweeps k = 1, 2, ... over the calls of `kinds` until a run no longer reaches k. Returns how many
/// failures were injected in all.
std::uint64_t sweep(fault_kind_mask kinds, bool checked, std::uint64_t* runs_out) {
  auto inner = bounded_sim();
  fault_injecting_device dev(*inner);
  fault_scenario scenario(*inner, dev, checked);
  std::uint64_t injected = 0;
  std::uint64_t absorbed = 0;
  std::uint64_t k = 1;
  for (;; ++k) {
    fault_plan plan;
    plan.kinds = kinds;
    plan.fail_at = k;
    const std::uint64_t before = dev.injected();
    const scenario_result r = scenario.run(plan, std::nullopt);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "sweep over kinds " << kinds << " failed at k = " << k << " ("
                    << (r.errors.empty() ? "no error" : r.errors.front()) << ")";
      break;
    }
    if (dev.injected() == before) break;  // k is past the last selected call: done
    injected += dev.injected() - before;
    // No typed error is fine too: the operation completed (a failed prefetch is dropped, a failed
    // background copy is retried by the next demand fault). Either way the checks above held.
    if (r.failures == 0) ++absorbed;
  }
  if (runs_out) *runs_out = k;
  std::printf("fault_sweep: kinds %#x: %llu runs, %llu injected, %llu completed without an error\n",
              kinds, static_cast<unsigned long long>(k), static_cast<unsigned long long>(injected),
              static_cast<unsigned long long>(absorbed));
  return injected;
}

TEST(fault_sweep, every_call_site_of_every_kind_fails_in_turn) {
  // First, a clean run: which kinds does the scenario reach at all?
  auto inner = bounded_sim();
  fault_injecting_device dev(*inner);
  fault_scenario scenario(*inner, dev, /*checked=*/true);
  const scenario_result clean = scenario.run(fault_plan{0, 0, 0, 0, false}, std::nullopt);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(clean.failures, 0);
  for (std::size_t i = 0; i < fault_kind_count; ++i) {
    const auto k = static_cast<fault_kind>(i);
    EXPECT_GT(dev.calls(k), 0u) << "the scenario never reaches a call of kind " << to_string(k);
  }
  for (std::size_t i = 0; i < fault_kind_count && !HasFailure(); ++i) {
    const auto k = static_cast<fault_kind>(i);
    std::uint64_t runs = 0;
    const std::uint64_t injected = sweep(mask_of(k), /*checked=*/true, &runs);
    EXPECT_GT(injected, 0u) << to_string(k);
    std::printf("fault_sweep: %-18s %4llu call sites failed in turn (clean run: %llu calls)\n",
                to_string(k), static_cast<unsigned long long>(injected),
                static_cast<unsigned long long>(dev.calls(k)));
  }
}

TEST(fault_sweep, all_kinds_mixed_without_checked_mode) {
  std::uint64_t runs = 0;
  const std::uint64_t injected = sweep(all_fault_kinds, /*checked=*/false, &runs);
  EXPECT_GT(injected, 50u);
  std::printf("fault_sweep: all kinds: %llu runs, %llu failures injected\n",
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(injected));
}

void soak(double rate, int runs) {
  auto inner = bounded_sim();
  fault_injecting_device dev(*inner);
  fault_scenario scenario(*inner, dev, /*checked=*/false);
  int failures = 0, constructed = 0;
  for (int i = 0; i < runs && !::testing::Test::HasFailure(); ++i) {
    fault_plan plan;
    plan.probability = rate;
    plan.seed = 1000 * static_cast<std::uint64_t>(i) + 17;
    const scenario_result r = scenario.run(plan, plan);
    failures += r.failures;
    constructed += r.constructed ? 1 : 0;
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "rate " << rate << " seed " << plan.seed << ": "
                    << (r.errors.empty() ? "no error" : r.errors.back());
    }
  }
  std::printf("fault_soak: rate %.3f: %d runs (%d constructed), %d failures, %llu injected\n", rate,
              runs, constructed, failures, static_cast<unsigned long long>(dev.injected()));
  EXPECT_GT(constructed, 0);
}

TEST(fault_soak, rate_0_1_percent) { soak(0.001, 40); }
TEST(fault_soak, rate_1_percent) { soak(0.01, 40); }
TEST(fault_soak, rate_10_percent) { soak(0.10, 40); }

}  // namespace
}  // namespace htp::test
