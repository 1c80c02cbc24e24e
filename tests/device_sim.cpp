// Behaviour specific to the sim backend: real concurrency between streams, capacity limits,
// validation of device ranges, poison, sticky errors.
#include <htp/checksum.hpp>
#include <htp/codec.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace htp::test {
namespace {

/// A sim device and a pinned allocation kept until the process exits. Constant-initialized, so it
/// is destroyed after every static initialized at run time (the sim's own registries included).
struct kept_device {
  std::unique_ptr<device> dev;
  void* pinned = nullptr;
  ~kept_device() {
    if (dev && pinned) dev->deallocate(memory_kind::pinned_host, pinned, 4096);
  }
};
kept_device kept_to_exit;

TEST(sim_device, a_device_destroyed_at_exit_after_every_other_static_frees_its_pinned_memory) {
  // The check is the exit itself: freeing pinned memory once the sim's registry of pinned ranges
  // was destroyed was a double free (a benchmark's static fixture crashed at exit this way).
  kept_to_exit.dev = make_sim_device();
  kept_to_exit.pinned = kept_to_exit.dev->allocate(memory_kind::pinned_host, 4096);
  EXPECT_NE(kept_to_exit.pinned, nullptr);
}

TEST(sim_device, streams_without_an_event_run_concurrently) {
  auto dev = make_sim_device();
  stream a(*dev), b(*dev);
  std::promise<void> from_b;
  auto arrived = from_b.get_future();
  bool a_saw_b = false;
  // a's function can only finish early if b's runs while a's is still running. The 60 s bound only
  // stops a broken (serialising) build from hanging; it is never reached when streams are
  // concurrent.
  dev->launch_host_func(
      [&] { a_saw_b = arrived.wait_for(std::chrono::seconds(60)) == std::future_status::ready; },
      a);
  dev->launch_host_func([&] { from_b.set_value(); }, b);
  a.synchronize();
  b.synchronize();
  EXPECT_TRUE(a_saw_b);
}

TEST(sim_device, capacity_limit_gives_out_of_memory_with_numbers) {
  sim_config c;
  c.device_memory_bytes = 1 << 20;
  auto dev = make_sim_device(c);
  void* p = dev->allocate(memory_kind::device, 768 * 1024);
  try {
    dev->allocate(memory_kind::device, 512 * 1024);
    FAIL() << "over capacity succeeded";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("524288"), std::string::npos) << m;  // the request
    EXPECT_NE(m.find("786432"), std::string::npos) << m;  // what is in use
    EXPECT_EQ(e.requested_bytes(), 512u * 1024);
  }
  EXPECT_EQ(dev->memory().free_bytes, (1u << 20) - 768 * 1024);
  dev->deallocate(memory_kind::device, p, 768 * 1024);
  EXPECT_EQ(dev->memory().free_bytes, 1u << 20);
}

TEST(sim_device, pinned_capacity_limit) {
  sim_config c;
  c.pinned_memory_bytes = 1 << 20;
  auto dev = make_sim_device(c);
  EXPECT_THROW(dev->allocate(memory_kind::pinned_host, (1 << 20) + 1), out_of_memory);
  void* p = dev->allocate(memory_kind::pinned_host, 1 << 20);
  dev->deallocate(memory_kind::pinned_host, p, 1 << 20);
}

TEST(sim_device, copies_outside_a_device_allocation_are_rejected) {
  auto dev = make_sim_device();
  stream s(*dev);
  void* d = dev->allocate(memory_kind::device, 4096);
  std::vector<unsigned char> host(8192);
  // overruns the device allocation by one byte
  EXPECT_THROW(dev->copy_async(d, host.data(), 4097, copy_direction::host_to_device, s),
               invalid_argument);
  // host memory named as device memory
  EXPECT_THROW(dev->copy_async(host.data(), d, 16, copy_direction::host_to_device, s),
               invalid_argument);
  // device memory named as host memory
  EXPECT_THROW(dev->copy_async(host.data(), d, 16, copy_direction::host_to_host, s),
               invalid_argument);
  s.synchronize();
  dev->deallocate(memory_kind::device, d, 4096);
}

TEST(sim_device, fresh_device_memory_is_poisoned) {
  auto dev = make_sim_device();
  auto* d = static_cast<unsigned char*>(dev->allocate(memory_kind::device, 1000));
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(d[i], 0xA5);
  dev->deallocate(memory_kind::device, d, 1000);
}

TEST(sim_device, a_throwing_host_function_is_a_sticky_error) {
  auto dev = make_sim_device();
  stream s(*dev);
  int after = 0;
  dev->launch_host_func([] { throw std::runtime_error("kernel fault"); }, s);
  dev->launch_host_func([&] { after = 1; }, s);  // later work still drains: nobody hangs
  EXPECT_THROW(s.synchronize(), logic_error);
  EXPECT_EQ(after, 1);
  EXPECT_THROW(dev->synchronize_all(), logic_error);
}

TEST(sim_device, a_corrupt_weight_frame_is_a_sticky_error_naming_the_corruption) {
  auto dev = make_sim_device();
  stream s(*dev);
  std::vector<std::uint8_t> weights(100000, 0x3C);
  std::vector<std::uint8_t> frame =
      encode_weights(weights.data(), weights.size(), weight_format::bf16);
  frame[40] ^= 0x01;  // inside the chunk directory
  void* wire = dev->allocate(memory_kind::device, frame.size());
  void* dst = dev->allocate(memory_kind::device, weights.size());
  dev->copy_async(wire, frame.data(), frame.size(), copy_direction::host_to_device, s);
  dev->decode_weights_async(wire, frame.size(), dst, weights.size(), s);
  try {
    s.synchronize();
    FAIL() << "a corrupt frame decoded";
  } catch (const logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  dev->deallocate(memory_kind::device, wire, frame.size());
  dev->deallocate(memory_kind::device, dst, weights.size());
}

TEST(sim_device, timing_only_decode_takes_its_time_and_touches_no_bytes) {
  sim_config c;
  c.timing_only = true;
  c.device_memory_bytes = std::size_t{64} << 30;
  c.decode_bytes_per_second = std::uint64_t{1} << 40;
  auto dev = make_sim_device(c);
  stream s(*dev);
  const std::size_t n = std::size_t{8} << 30;  // address space only: a read or write would fault
  void* wire = dev->allocate(memory_kind::device, n / 2);
  void* dst = dev->allocate(memory_kind::device, n);
  dev->decode_weights_async(wire, n / 2, dst, n, s);
  s.synchronize();
  dev->deallocate(memory_kind::device, wire, n / 2);
  dev->deallocate(memory_kind::device, dst, n);
}

TEST(sim_device, modelled_link_moves_correct_bytes) {
  sim_config c;
  c.h2d_bytes_per_second = 2'000'000'000;
  c.d2h_bytes_per_second = 2'000'000'000;
  c.copy_latency_ns = 1000;
  auto dev = make_sim_device(c);
  stream s1(*dev), s2(*dev);
  const std::size_t n = 1 << 20;
  std::vector<unsigned char> in(n), out1(n), out2(n);
  fill_pattern(in.data(), n, 3);
  void* d = dev->allocate(memory_kind::device, n);
  dev->copy_async(d, in.data(), n, copy_direction::host_to_device, s1);
  event e(*dev);
  e.record(s1);
  dev->wait(e, s2);
  dev->copy_async(out1.data(), d, n, copy_direction::device_to_host, s2);
  dev->copy_async(out2.data(), d, n, copy_direction::device_to_host, s1);
  dev->synchronize_all();
  EXPECT_EQ(checksum(out1.data(), n), checksum(in.data(), n));
  EXPECT_EQ(checksum(out2.data(), n), checksum(in.data(), n));
  dev->deallocate(memory_kind::device, d, n);
}

TEST(sim_device, unknown_streams_and_events_are_invalid_argument) {
  auto dev = make_sim_device();
  int not_a_stream = 0;
  EXPECT_THROW(dev->launch_host_func([] {}, stream_ref{&not_a_stream}), invalid_argument);
  EXPECT_THROW(dev->query(event_ref{&not_a_stream}), invalid_argument);
}

TEST(sim_device, bad_config_is_invalid_argument) {
  sim_config c;
  c.device_memory_bytes = 0;
  EXPECT_THROW(make_sim_device(c), invalid_argument);
  sim_config c2;
  c2.copy_engines = 0;
  EXPECT_THROW(make_sim_device(c2), invalid_argument);
  sim_config c3;
  c3.decode_bytes_per_second = 0;
  EXPECT_THROW(make_sim_device(c3), invalid_argument);
}

/// Sets an environment variable for one test and restores it after.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~scoped_env() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(make_device, cuda_without_a_gpu_throws_cuda_error_with_reason_and_remedy) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present; cuda is usable here";
  try {
    make_device(backend::cuda);
    FAIL() << "make_device(cuda) returned without a GPU";
  } catch (const cuda_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot run"), std::string::npos) << what;
    EXPECT_NE(what.find("HTP_BACKEND"), std::string::npos) << what;  // the remedy names the choice
    EXPECT_NE(what.find("backend::sim"), std::string::npos) << what;
  }
}

TEST(make_device, automatic_does_not_fall_back_unless_asked) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present; automatic picks cuda here";
  {
    scoped_env env("HTP_BACKEND", nullptr);
    EXPECT_EQ(backend_from_environment(), backend::cuda);
    EXPECT_THROW(make_device(backend::automatic), cuda_error);
  }
  {
    scoped_env env("HTP_BACKEND", "auto");
    EXPECT_EQ(backend_from_environment(), backend::cuda_or_sim);
    EXPECT_EQ(make_device(backend::automatic)->properties().kind, backend::sim);
  }
  {
    scoped_env env("HTP_BACKEND", "sim");
    EXPECT_EQ(make_device()->properties().kind, backend::sim);
  }
  {
    scoped_env env("HTP_BACKEND", "cuda");
    EXPECT_THROW(make_device(), cuda_error);
  }
  EXPECT_EQ(make_device(backend::cuda_or_sim)->properties().kind, backend::sim);
}

TEST(make_device, an_unknown_htp_backend_value_is_refused_by_name) {
  scoped_env env("HTP_BACKEND", "gpu");
  EXPECT_THROW(backend_from_environment(), invalid_argument);
  EXPECT_THROW(make_device(), invalid_argument);
  // An explicit backend does not read the variable.
  EXPECT_EQ(make_device(backend::sim)->properties().kind, backend::sim);
}

TEST(sim_device, a_copy_with_a_pageable_side_has_completed_when_it_returns) {
  // CUDA may make such a copy synchronous with respect to the host (it stages pageable memory);
  // the sim always does, so code that issues one where the stream is held fails here too.
  auto dev = make_sim_device();
  stream s(*dev);
  const std::size_t n = 1 << 16;
  void* d = dev->allocate(memory_kind::device, n);
  void* pinned = dev->allocate(memory_kind::pinned_host, n);
  std::vector<unsigned char> up(n), down(n, 0);
  fill_pattern(up.data(), n, 3);
  dev->copy_async(d, up.data(), n, copy_direction::host_to_device, s);
  up.assign(n, 0);  // the source may be reused at once: the copy has moved it
  dev->copy_async(down.data(), d, n, copy_direction::device_to_host, s);
  std::vector<unsigned char> want(n);
  fill_pattern(want.data(), n, 3);
  EXPECT_EQ(checksum(down.data(), n), checksum(want.data(), n)) << "read before any synchronize";
  // A host function waiting on a gate holds the stream: a pinned copy queues behind it and
  // returns, a pageable one returns only once the gate is open and the copy is done.
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  dev->launch_host_func([opened] { opened.wait(); }, s);
  dev->copy_async(pinned, d, n, copy_direction::device_to_host, s);  // does not block
  std::atomic<bool> gate_open{false};
  auto pageable = std::async(std::launch::async, [&] {
    dev->copy_async(down.data(), d, n, copy_direction::device_to_host, s);
    return gate_open.load();
  });
  gate_open = true;
  gate.set_value();
  ASSERT_EQ(pageable.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "a hang";
  EXPECT_TRUE(pageable.get()) << "the pageable copy returned while the stream was held";
  s.synchronize();
  dev->deallocate(memory_kind::pinned_host, pinned, n);
  dev->deallocate(memory_kind::device, d, n);
}

TEST(sim_device, device_memory_of_another_sim_device_is_not_this_devices) {
  // Each sim device is its own GPU: a copy's device side must be memory of this device.
  auto dev = make_sim_device(), other = make_sim_device();
  stream s(*dev);
  void* mine = dev->allocate(memory_kind::device, 4096);
  void* theirs = other->allocate(memory_kind::device, 4096);
  EXPECT_THROW(dev->copy_async(theirs, mine, 4096, copy_direction::device_to_device, s),
               invalid_argument);
  std::vector<unsigned char> host(4096);
  EXPECT_THROW(dev->copy_async(host.data(), theirs, 4096, copy_direction::device_to_host, s),
               invalid_argument);
  other->deallocate(memory_kind::device, theirs, 4096);
  dev->deallocate(memory_kind::device, mine, 4096);
}

TEST(sim_device, a_destroyed_stream_is_refused) {
  // Undefined on cuda (the runtime may answer cudaErrorInvalidResourceHandle); the sim knows.
  auto dev = make_sim_device();
  const stream_ref gone = dev->create_stream();
  dev->destroy_stream(gone);
  EXPECT_THROW(dev->synchronize(gone), invalid_argument);
  EXPECT_THROW(dev->launch_host_func([] {}, gone), invalid_argument);
}

TEST(sim_device, a_device_call_from_a_host_function_fails_the_stream_if_uncaught) {
  // The refusal is a throw inside the host function: uncaught, it is the stream's sticky error
  // (on cuda it would be swallowed), and nothing deadlocks.
  auto dev = make_sim_device();
  stream s(*dev);
  dev->launch_host_func([&] { dev->synchronize(s); }, s);
  try {
    s.synchronize();
    ADD_FAILURE() << "the stream did not fail";
  } catch (const logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("host function"), std::string::npos) << e.what();
  }
}

// A replayed step takes the modelled link time, exactly as the same copies queued directly: the
// copy stream's H2D copy and the origin's D2H copy run on their own lanes and overlap, and each
// replay starts when the previous one ends. The stream is held by a gate until every replay is
// queued, so every modelled time follows from the gate's release by the model's integer
// arithmetic (link.cpp), and elapsed() is exact. In timing-only mode too (no bytes move).
TEST(sim_device, replayed_copies_take_the_modelled_link_time_and_lanes_overlap) {
  for (bool timing_only : {false, true}) {
    sim_config c;
    c.h2d_bytes_per_second = 1'000'000'000;  // 1 ns a byte
    c.d2h_bytes_per_second = 2'000'000'000;
    c.copy_latency_ns = 1000;
    c.timing_only = timing_only;
    auto dev = make_sim_device(c);
    const std::size_t a = std::size_t{1} << 20, b = std::size_t{1} << 20;
    void* up_host = dev->allocate(memory_kind::pinned_host, a);
    void* down_host = dev->allocate(memory_kind::pinned_host, b);
    void* up_dev = dev->allocate(memory_kind::device, a);
    void* down_dev = dev->allocate(memory_kind::device, b);
    {
      stream s(*dev), copy(*dev);
      event forked(*dev), joined(*dev);
      dev->begin_capture(s);
      dev->record(forked, s);
      dev->wait(forked, copy);
      dev->copy_async(up_dev, up_host, a, copy_direction::host_to_device, copy);
      dev->copy_async(down_host, down_dev, b, copy_direction::device_to_host, s);
      dev->record(joined, copy);
      dev->wait(joined, s);
      graph g = graph::end_capture(*dev, s);
      const event_ref t0 = dev->create_timed_event(), t1 = dev->create_timed_event();
      std::promise<void> gate;
      auto opened = gate.get_future().share();
      dev->launch_host_func([opened] { opened.wait(); }, s);
      dev->record(t0, s);
      constexpr int replays = 5;
      for (int r = 0; r < replays; ++r) g.launch(s);
      dev->record(t1, s);
      gate.set_value();
      s.synchronize();
      // H2D: 1000 ns + 2^20 ns; D2H, overlapping it: 1000 ns + 2^19 ns.
      const auto per_replay = std::chrono::nanoseconds(1000 + (std::int64_t{1} << 20));
      EXPECT_EQ(dev->elapsed(t0, t1), std::optional(replays * per_replay))
          << "timing_only=" << timing_only;
      dev->destroy_event(t0);
      dev->destroy_event(t1);
    }
    dev->deallocate(memory_kind::device, down_dev, b);
    dev->deallocate(memory_kind::device, up_dev, a);
    dev->deallocate(memory_kind::pinned_host, down_host, b);
    dev->deallocate(memory_kind::pinned_host, up_host, a);
  }
}

TEST(sim_device, timing_only_verify_checksum_counts_without_reading_bytes) {
  sim_config c;
  c.timing_only = true;
  auto dev = make_sim_device(c);
  const std::size_t n = std::size_t{4} << 20;
  void* d = dev->allocate(memory_kind::device, n);  // address space only: reading it faults
  auto* counters = static_cast<std::uint32_t*>(dev->allocate(memory_kind::pinned_host, 8));
  counters[0] = counters[1] = 0;
  {
    stream s(*dev);
    dev->verify_checksum_async(d, n, 12345, counters, s);
    s.synchronize();
  }
  EXPECT_EQ(counters[0], 1u);
  EXPECT_EQ(counters[1], 0u);
  dev->deallocate(memory_kind::pinned_host, counters, 8);
  dev->deallocate(memory_kind::device, d, n);
}

}  // namespace
}  // namespace htp::test
