// The static step (htp/static_step.hpp) on each backend: a model-shaped step run eagerly and
// captured, replayed 100 times with no host call in between, every kernel checking the bytes it
// reads; raw and coded; corruption found; misuse refused.
#include "device_fixture.hpp"

#include <htp/checksum.hpp>
#include <htp/codec.hpp>
#include <htp/error.hpp>
#include <htp/static_step.hpp>
#include <htp/token_bucket.hpp>

#include "common/synthetic_weights.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

namespace htp::test {
namespace {

/// A model-shaped step: `layers` positions of 4 tensors of mixed sizes (bf16-like weights), the
/// first tensor also read by the last position (tied), each tensor's bytes in pinned host memory,
/// stored raw or coded, and a plan at 40% of the bytes.
struct model_step {
  device& dev;
  static_plan_input in;
  std::vector<std::vector<std::uint8_t>> raw;  // each tensor's bytes
  std::vector<std::size_t> host_bytes;
  std::vector<void*> host;            // pinned: raw bytes or the coded frame
  std::uint32_t* counters = nullptr;  // verify_checksum_async's {checked, mismatched}

  model_step(device& d, std::size_t layers, bool coded) : dev(d) {
    in.link_bytes_per_second = 20e9;
    in.decode_bytes_per_second = 100e9;
    const std::size_t sizes[] = {24 << 10, 8 << 10, 40 << 10, 40 << 10};
    std::size_t total = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      static_position p;
      p.compute_ns = 20e3;
      for (const std::size_t bytes : sizes) {
        const std::size_t t = in.tensors.size();
        p.tensors.push_back(t);
        raw.push_back(synthetic::llama_mixture(bytes / 2, weight_format::bf16, 100 + t));
        std::vector<std::uint8_t> stored = raw.back();
        static_tensor x{"layers." + std::to_string(l) + ".w" + std::to_string(p.tensors.size()),
                        bytes};
        if (coded) {
          codec_options o;
          o.chunk_bytes = 16 << 10;
          stored = encode_weights(raw.back().data(), bytes, weight_format::bf16, o);
          x.wire_bytes = stored.size();
        }
        in.tensors.push_back(x);
        host_bytes.push_back(stored.size());
        host.push_back(dev.allocate(memory_kind::pinned_host, stored.size()));
        std::memcpy(host.back(), stored.data(), stored.size());
        total += bytes;
      }
      in.positions.push_back(p);
    }
    in.positions.back().tensors.push_back(0);  // tied: the first tensor read again at the end
    in.hbm_budget = total * 4 / 10;
    counters = static_cast<std::uint32_t*>(dev.allocate(memory_kind::pinned_host, 8));
    counters[0] = counters[1] = 0;
  }
  ~model_step() {
    for (std::size_t t = 0; t < host.size(); ++t) {
      dev.deallocate(memory_kind::pinned_host, host[t], host_bytes[t]);
    }
    dev.deallocate(memory_kind::pinned_host, counters, 8);
  }
  std::vector<const void*> sources() const { return {host.begin(), host.end()}; }
  std::size_t reads_per_step() const {
    std::size_t n = 0;
    for (const auto& p : in.positions) n += p.tensors.size();
    return n;
  }
  /// The caller's kernels: each position checks the checksum of every tensor it reads.
  std::function<void(std::size_t, stream_ref)> kernels(static_step& step) {
    return [this, &step](std::size_t p, stream_ref s) {
      for (const std::size_t t : in.positions[p].tensors) {
        dev.verify_checksum_async(step.address(t, p), in.tensors[t].bytes,
                                  checksum(raw[t].data(), raw[t].size()), counters, s);
      }
    };
  }
};

/// A model_step's plan, its step primed, and a compute stream: what every case starts from.
struct primed {
  static_plan plan;
  static_step step;
  stream compute;
  primed(device& dev, const model_step& m)
      : plan(plan_static(m.in)), step(dev, m.in, plan, m.sources()), compute(dev) {
    step.prime();
  }
  /// A tensor the step loads every time (of a use neither carried nor kept), the last such.
  std::size_t reloaded(bool last_of_use) const {
    std::size_t t = 0;
    for (const auto& use : plan.uses) {
      if (use.freed_by >= 0 && !use.carried) t = last_of_use ? use.tensors.back() : use.tensors[0];
    }
    return t;
  }
};

template <typename Backend>
class static_step_test : public device_test<Backend> {};
TYPED_TEST_SUITE(static_step_test, backends, backend_names);

TYPED_TEST(static_step_test, eager_steps_read_every_byte_right) {
  model_step m(*this->dev, 6, false);
  primed x(*this->dev, m);
  auto& [plan, step, compute] = x;
  ASSERT_GT(plan.streamed_bytes, 0u) << "the plan must stream something to test the ring";
  for (int i = 0; i < 3; ++i) step.run(compute, m.kernels(step));
  compute.synchronize();
  EXPECT_EQ(m.counters[0], 3 * m.reads_per_step());
  EXPECT_EQ(m.counters[1], 0u);
}

TYPED_TEST(static_step_test, a_captured_step_replays_100_times_with_the_right_bytes) {
  for (const bool coded : {false, true}) {
    SCOPED_TRACE(coded ? "coded" : "raw");
    model_step m(*this->dev, 6, coded);
    primed x(*this->dev, m);
    auto& [plan, step, compute] = x;
    ASSERT_GT(plan.streamed_bytes, 0u);
    std::set<void*> addresses;
    for (std::size_t p = 0; p < m.in.positions.size(); ++p) {
      for (const std::size_t t : m.in.positions[p].tensors) addresses.insert(step.address(t, p));
    }
    const graph g = step.capture(compute, m.kernels(step));
    EXPECT_EQ(m.counters[0], 0u) << "capturing ran nothing";
    for (int i = 0; i < 100; ++i) step.launch(g, compute);  // no host call in between
    compute.synchronize();
    EXPECT_EQ(m.counters[0], 100 * m.reads_per_step());
    EXPECT_EQ(m.counters[1], 0u);
    EXPECT_TRUE(step.take_decode_failures().empty());
    std::set<void*> after;
    for (std::size_t p = 0; p < m.in.positions.size(); ++p) {
      for (const std::size_t t : m.in.positions[p].tensors) after.insert(step.address(t, p));
    }
    EXPECT_EQ(addresses, after);
    std::size_t raw_streamed = 0;  // what the same loads would move raw
    for (const auto& use : plan.uses) {
      for (const std::size_t t : use.tensors)
        raw_streamed += use.freed_by >= 0 ? m.in.tensors[t].bytes : 0;
    }
    if (coded) {  // Llama-like bf16 (synthetic::llama_mixture): about 0.68 of the bytes
      const double ratio =
          static_cast<double>(plan.streamed_bytes) / static_cast<double>(raw_streamed);
      std::printf("coded replay moves %.3f of the raw bytes\n", ratio);
      EXPECT_LT(ratio, 0.8) << "coded loads move fewer bytes";
    }
  }
}

TYPED_TEST(static_step_test, damaged_host_bytes_are_seen_by_every_replay) {
  model_step m(*this->dev, 6, false);
  primed x(*this->dev, m);
  auto& [plan, step, compute] = x;
  const graph g = step.capture(compute, m.kernels(step));
  // A tensor the step reloads every time: its damaged host copy reaches the kernels on replay.
  const std::size_t victim = x.reloaded(false);
  static_cast<std::uint8_t*>(m.host[victim])[17] ^= 0x40;
  for (int i = 0; i < 10; ++i) step.launch(g, compute);
  compute.synchronize();
  EXPECT_EQ(m.counters[1], 10u) << "one mismatch per replay, of '" << m.in.tensors[victim].name
                                << "'";
}

TYPED_TEST(static_step_test, a_damaged_coded_frame_is_named_after_the_replay) {
  model_step m(*this->dev, 6, true);
  primed x(*this->dev, m);
  auto& [plan, step, compute] = x;
  const graph g = step.capture(compute, {});
  const std::size_t victim = x.reloaded(true);
  auto* frame = static_cast<std::uint8_t*>(m.host[victim]);
  frame[m.host_bytes[victim] - 5] ^= 0x10;  // inside the last chunk's coded bytes
  step.launch(g, compute);
  compute.synchronize();
  const auto failed = step.take_decode_failures();
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0], m.in.tensors[victim].name);
  EXPECT_TRUE(step.take_decode_failures().empty()) << "taken once";
}

TYPED_TEST(static_step_test, kernels_that_leave_a_stream_unjoined_are_refused_at_capture) {
  model_step m(*this->dev, 4, false);
  static_step step(*this->dev, m.in, plan_static(m.in), m.sources());
  step.prime();
  stream compute(*this->dev), side(*this->dev);
  event forked(*this->dev);
  auto leaky = [&](std::size_t p, stream_ref s) {
    if (p != 1) return;
    forked.record(s);
    this->dev->wait(forked, side);  // side joins the capture and never rejoins
    this->dev->verify_checksum_async(step.address(m.in.positions[1].tensors[0], 1),
                                     m.in.tensors[m.in.positions[1].tensors[0]].bytes, 0,
                                     m.counters, side);
  };
  EXPECT_THROW(step.capture(compute, leaky), logic_error);
  EXPECT_FALSE(this->dev->is_capturing(compute));
  // The step and the streams are usable afterwards: a good capture replays.
  const graph g = step.capture(compute, m.kernels(step));
  step.launch(g, compute);
  compute.synchronize();
  EXPECT_EQ(m.counters[0], m.reads_per_step());
  EXPECT_EQ(m.counters[1], 0u);
}

TYPED_TEST(static_step_test, a_step_left_part_way_starts_over_at_the_next_first_position) {
  model_step m(*this->dev, 6, false);
  primed x(*this->dev, m);
  auto& [plan, step, compute] = x;
  const auto kernels = m.kernels(step);
  std::size_t reads = 0;
  for (std::size_t p = 0; p < 3; ++p) {  // a forward that raised in position 3
    step.begin(p, compute);
    kernels(p, compute);
    step.end(p, compute);
    reads += m.in.positions[p].tensors.size();
  }
  step.run(compute, kernels);  // starts over: what a step starts with is loaded again
  step.run(compute, kernels);
  compute.synchronize();
  EXPECT_EQ(m.counters[0], reads + 2 * m.reads_per_step());
  EXPECT_EQ(m.counters[1], 0u);
  // Inside a capture it cannot start over: refused, typed.
  step.begin(0, compute);
  step.end(0, compute);
  this->dev->begin_capture(compute);
  EXPECT_THROW(step.begin(0, compute), logic_error);
  graph g(*this->dev, this->dev->end_capture(compute));  // refused before anything was queued
}

TYPED_TEST(static_step_test, launch_takes_each_replays_streamed_bytes_from_the_bucket) {
  model_step m(*this->dev, 6, false);
  primed x(*this->dev, m);
  auto& [plan, step, compute] = x;
  const graph g = step.capture(compute, m.kernels(step));
  // A virtual clock a second further on each reading: the bucket refills between takes, and the
  // burst (a third of a step) makes each launch take its bytes in pieces.
  std::int64_t now = 0;
  token_bucket bucket(1'000'000'000, plan.streamed_bytes / 3 + 1,
                      [&] { return now += 1'000'000'000; });
  const std::uint64_t before = bucket.total_taken();
  for (int i = 0; i < 5; ++i) step.launch(g, compute, &bucket);
  compute.synchronize();
  EXPECT_EQ(bucket.total_taken() - before, 5 * plan.streamed_bytes);
  EXPECT_EQ(m.counters[0], 5 * m.reads_per_step());
  EXPECT_EQ(m.counters[1], 0u);
}

TYPED_TEST(static_step_test, positions_out_of_order_are_refused) {
  model_step m(*this->dev, 4, false);
  static_step step(*this->dev, m.in, plan_static(m.in), m.sources());
  stream compute(*this->dev);
  EXPECT_THROW(step.begin(1, compute), logic_error);
  EXPECT_THROW(step.end(0, compute), logic_error);
  step.begin(0, compute);
  EXPECT_THROW(step.begin(1, compute), logic_error) << "position 0 has not ended";
  EXPECT_THROW(step.end(1, compute), logic_error);
  step.end(0, compute);
  EXPECT_THROW(step.begin(2, compute), logic_error) << "position 1 is next";
  EXPECT_THROW(static_step(*this->dev, m.in, plan_static(m.in), {}), invalid_argument);
  static_plan other = plan_static(m.in);
  other.uses.at(0).offsets.at(0) = other.arena_bytes;  // not a plan of this input
  EXPECT_THROW(static_step(*this->dev, m.in, other, m.sources()), invalid_argument);
  compute.synchronize();
}

}  // namespace
}  // namespace htp::test
