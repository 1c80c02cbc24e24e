// gradient_reducer on sim GPUs: the reductions wait for compute, the sums (all-reduce) and the
// shards (reduce-scatter) are right, join() orders compute after them, and the figures split the
// reduction time into hidden and exposed.
#include "deadline.hpp"
#include "sim_gpus.hpp"

#include <htp/collectives.hpp>
#include <htp/error.hpp>
#include <htp/gradient_reducer.hpp>
#include <htp/sim_device.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace htp {
namespace {

using test::wait_until;

/// N sim GPUs, each with a compute stream (sim_gpus's) and a reduction stream, and sim
/// collectives over them.
struct gpus : test::sim_gpus {
  std::vector<std::unique_ptr<stream>>& compute = streams;
  std::vector<std::unique_ptr<stream>> reduction;
  std::unique_ptr<collectives> coll;
  explicit gpus(std::size_t n, std::uint64_t interconnect = 0) : sim_gpus(n) {
    for (const auto& d : devs) reduction.push_back(std::make_unique<stream>(*d));
    coll = make_sim_collectives(ptrs, interconnect);
  }
};

/// A host function that holds `s` until the future is ready (at most the hang limit).
void hold(device& d, stream& s, std::shared_future<void> gate) {
  d.launch_host_func([gate] { (void)gate.wait_for(test::hang_limit); }, s);
}

TEST(gradient_reducer, all_reduce_waits_for_the_backward_and_join_orders_compute_after_it) {
  gpus g(3);
  std::vector<std::vector<float>> grad(3, std::vector<float>(64, 0.0f));
  std::vector<std::unique_ptr<gradient_reducer>> red;
  std::promise<void> open;
  const std::shared_future<void> gate = open.get_future().share();
  std::vector<std::atomic<bool>> seen_sum(3);
  for (std::size_t r = 0; r < 3; ++r) {
    red.push_back(std::make_unique<gradient_reducer>(*g.devs[r], *g.coll, r, *g.reduction[r]));
    // The "backward" writes the gradient on compute, after a gate the test opens later.
    hold(*g.devs[r], *g.compute[r], gate);
    g.devs[r]->launch_host_func(
        [&grad, r] {
          for (std::size_t i = 0; i < 64; ++i) grad[r][i] = float(r + 1) * float(i);
        },
        *g.compute[r]);
  }
  for (std::size_t r = 0; r < 3; ++r) {
    red[r]->all_reduce(grad[r].data(), 64, element_type::float32, *g.compute[r]);
    red[r]->join(*g.compute[r]);
    g.devs[r]->launch_host_func([&, r] { seen_sum[r] = grad[r][10] == 60.0f; }, *g.compute[r]);
  }
  // Held at the gate: nothing summed yet (the reduction waits for the backward).
  for (std::size_t r = 0; r < 3; ++r) EXPECT_EQ(grad[r][10], 0.0f);
  open.set_value();
  for (std::size_t r = 0; r < 3; ++r) g.compute[r]->synchronize();
  for (std::size_t r = 0; r < 3; ++r) {
    for (std::size_t i = 0; i < 64; ++i) ASSERT_EQ(grad[r][i], 6.0f * float(i)) << r << " " << i;
    EXPECT_TRUE(seen_sum[r]) << "compute after join() saw the summed gradient on GPU " << r;
    const gradient_reduction_metrics m = red[r]->metrics();
    EXPECT_EQ(m.all_reduces, 1u);
    EXPECT_EQ(m.bytes, 64u * 4u);
    EXPECT_EQ(m.steps, 1u) << "the joined step's events completed";
  }
}

TEST(gradient_reducer, reduce_scatter_leaves_each_rank_the_sum_of_its_shard) {
  gpus g(4);
  const std::size_t count = 16;  // per shard
  std::vector<std::vector<float>> grad(4, std::vector<float>(4 * count));
  std::vector<std::vector<float>> shard(4, std::vector<float>(count, -1.0f));
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t i = 0; i < 4 * count; ++i) grad[r][i] = float(r) + float(i);
  }
  std::vector<gradient_reduction_metrics> m(4);
  for (std::size_t r = 0; r < 4; ++r) {
    ts.emplace_back([&, r] {  // one thread per GPU, as a training loop drives them
      gradient_reducer red(*g.devs[r], *g.coll, r, *g.reduction[r]);
      red.reduce_scatter(grad[r].data(), shard[r].data(), count, element_type::float32,
                         *g.compute[r]);
      // A second layer in place: rank r's shard is block r of its own gradient.
      red.reduce_scatter(grad[r].data(), grad[r].data() + r * count, count, element_type::float32,
                         *g.compute[r]);
      red.join(*g.compute[r]);
      g.compute[r]->synchronize();
      m[r] = red.metrics();
    });
  }
  for (auto& t : ts) t.join();
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      const float want = 6.0f + 4.0f * float(r * count + i);  // (0 + 1 + 2 + 3) + 4 x element
      ASSERT_EQ(shard[r][i], want) << "rank " << r << " element " << i;
      ASSERT_EQ(grad[r][r * count + i], want) << "in place, rank " << r << " element " << i;
    }
    EXPECT_EQ(m[r].reduce_scatters, 2u);
    EXPECT_EQ(m[r].bytes, 2u * 4u * count * 4u) << "each rank hands in every shard's gradient";
    EXPECT_EQ(m[r].steps, 1u);
  }
}

/// One GPU whose step issues one reduction: the compute stream is held until `compute_done_after`
/// says so, which decides whether the reduction ran under compute.
struct one_gpu_step {
  gpus g{1};
  gradient_reducer red{*g.devs[0], *g.coll, 0, *g.reduction[0]};
  std::vector<float> grad = std::vector<float>(1024, 1.0f);
};

TEST(gradient_reducer, a_reduction_that_ends_under_compute_is_hidden) {
  one_gpu_step s;
  device& d = *s.g.devs[0];
  std::promise<void> reduced, open;
  const std::shared_future<void> gate = open.get_future().share();
  s.red.all_reduce(s.grad.data(), s.grad.size(), element_type::float32, *s.g.compute[0]);
  // Marks the reduction's end on its stream; the compute stream's later work is held until then.
  d.launch_host_func([&reduced] { reduced.set_value(); }, *s.g.reduction[0]);
  hold(d, *s.g.compute[0], gate);
  ASSERT_EQ(reduced.get_future().wait_for(test::hang_limit), std::future_status::ready);
  open.set_value();  // compute's last work now ends after the reduction did
  s.red.join(*s.g.compute[0]);
  s.g.compute[0]->synchronize();
  const gradient_reduction_metrics m = s.red.metrics();
  ASSERT_EQ(m.steps, 1u);
  EXPECT_EQ(m.exposed_ms, 0.0) << "the reduction ended before compute's last work";
  EXPECT_EQ(m.hidden_ms, m.reduction_ms);
  EXPECT_EQ(m.exposed_share(), 0.0);
}

TEST(gradient_reducer, a_reduction_still_running_when_compute_ends_is_exposed) {
  gpus g(2, 1'000'000);  // 2 ranks at a modelled 1 MB/s: 4 KiB take ~2 ms of device time
  std::vector<std::vector<float>> grad(2, std::vector<float>(1024, 1.0f));
  std::vector<gradient_reduction_metrics> m(2);
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      gradient_reducer red(*g.devs[r], *g.coll, r, *g.reduction[r]);
      red.all_reduce(grad[r].data(), 1024, element_type::float32, *g.compute[r]);
      red.join(*g.compute[r]);  // compute has no work after the backward: all of it is exposed
      g.compute[r]->synchronize();
      m[r] = red.metrics();
    });
  }
  for (auto& t : ts) t.join();
  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(m[r].steps, 1u);
    EXPECT_GT(m[r].reduction_ms, 0.0);
    EXPECT_GT(m[r].exposed_ms, 0.0) << "compute waited for the modelled interconnect";
    EXPECT_LE(m[r].exposed_ms, m[r].reduction_ms);
    EXPECT_DOUBLE_EQ(m[r].hidden_ms + m[r].exposed_ms, m[r].reduction_ms);
    EXPECT_EQ(grad[r][5], 2.0f);
  }
}

TEST(gradient_reducer, reset_drops_the_steps_so_far_and_a_step_without_reductions_counts_nothing) {
  one_gpu_step s;
  s.red.all_reduce(s.grad.data(), 8, element_type::float32, *s.g.compute[0]);
  s.red.join(*s.g.compute[0]);
  s.g.compute[0]->synchronize();
  s.red.reset_metrics();
  EXPECT_EQ(s.red.metrics().steps, 0u);
  EXPECT_EQ(s.red.metrics().all_reduces, 0u);
  s.red.join(*s.g.compute[0]);  // no reduction in this step: nothing to wait for or count
  s.red.all_reduce(s.grad.data(), 8, element_type::float32, *s.g.compute[0]);
  s.red.join(*s.g.compute[0]);
  s.g.compute[0]->synchronize();
  ASSERT_TRUE(wait_until([&] { return s.red.metrics().steps == 1; }, "the step's figures"));
  EXPECT_EQ(s.red.metrics().all_reduces, 1u);
}

TEST(gradient_reducer, bad_arguments_and_aborted_collectives_are_typed_errors) {
  gpus g(2);
  EXPECT_THROW(gradient_reducer(*g.devs[0], *g.coll, 2, *g.reduction[0]), invalid_argument);
  EXPECT_THROW(gradient_reducer(*g.devs[0], *g.coll, 0, stream_ref{}), invalid_argument);
  gradient_reducer red(*g.devs[0], *g.coll, 0, *g.reduction[0]);
  std::vector<float> x(8);
  EXPECT_THROW(red.all_reduce(nullptr, 8, element_type::float32, *g.compute[0]), invalid_argument);
  EXPECT_THROW(red.all_reduce(x.data(), 0, element_type::float32, *g.compute[0]), invalid_argument);
  EXPECT_THROW(red.reduce_scatter(x.data(), nullptr, 4, element_type::float32, *g.compute[0]),
               invalid_argument);
  g.coll->abort("a test aborts the run");
  try {
    red.all_reduce(x.data(), 8, element_type::float32, *g.compute[0]);
    FAIL() << "a reduction over aborted collectives was accepted";
  } catch (const logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("a test aborts the run"), std::string::npos) << e.what();
  }
  red.join(*g.compute[0]);  // nothing was queued: no wait
  g.compute[0]->synchronize();
  EXPECT_EQ(red.metrics().all_reduces, 0u);
  EXPECT_EQ(red.metrics().steps, 0u);
}

}  // namespace
}  // namespace htp
