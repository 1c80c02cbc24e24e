// The transfer engine on the sim backend: chunking, priorities, cancellation, the compute stream
// waiting on requests not yet issued, metrics, and every error path. Ordering is made observable by
// holding the engine's stream at a gate (a host function waiting on a future), never by sleeping.
#include "deadline.hpp"

#include <htp/checksum.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>
#include <htp/token_bucket.hpp>
#include <htp/transfer_engine.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace htp::test {
namespace {

constexpr std::size_t chunk = 64 << 10;

/// Holds a stream until opened; opens itself on destruction so a failing test never hangs.
struct gate {
  std::promise<void> promise;
  std::shared_future<void> future = promise.get_future().share();
  bool opened = false;
  void hold(device& dev, stream_ref s) {
    dev.launch_host_func([f = future] { f.wait(); }, s);
  }
  void open() {
    if (!opened) promise.set_value();
    opened = true;
  }
  ~gate() { open(); }
};

/// The order chunks were issued in, as the engine's hook reports it.
struct issue_log {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<transfer_chunk_info> chunks;
  void add(const transfer_chunk_info& c) {
    {
      std::lock_guard lock(mutex);
      chunks.push_back(c);
    }
    cv.notify_all();
  }
  /// Waits until `n` chunks have been issued; fails after hang_limit.
  ::testing::AssertionResult wait_for(std::size_t n) {
    std::unique_lock lock(mutex);
    if (cv.wait_for(lock, hang_limit, [&] { return chunks.size() >= n; })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "waiting for " << n << " chunks to be issued: " << chunks.size() << " after "
           << hang_limit.count() << " s (a hang)";
  }
  std::vector<transfer_chunk_info> snapshot() {
    std::lock_guard lock(mutex);
    return chunks;
  }
};

struct buffer {
  device& dev;
  memory_kind kind;
  std::size_t bytes;
  unsigned char* ptr;
  buffer(device& d, memory_kind k, std::size_t n)
      : dev(d), kind(k), bytes(n), ptr(static_cast<unsigned char*>(d.allocate(k, n))) {}
  ~buffer() { dev.deallocate(kind, ptr, bytes); }
  memory_region region() const { return {ptr, bytes}; }
};

class transfer_test : public ::testing::Test {
 protected:
  static constexpr std::size_t arena = 8 << 20;
  transfer_test() {
    sim_config c;
    c.device_memory_bytes = 64 << 20;
    c.pinned_memory_bytes = 64 << 20;
    dev = make_sim_device(c);
    hbm = std::make_unique<buffer>(*dev, memory_kind::device, arena);
    host = std::make_unique<buffer>(*dev, memory_kind::pinned_host, arena);
    back = std::make_unique<buffer>(*dev, memory_kind::pinned_host, arena);
  }
  transfer_config base_config() {
    transfer_config c;
    c.chunk_bytes = chunk;
    c.max_in_flight_chunks = 3;
    c.h2d.link_bytes_per_second = 4'000'000'000;  // skip calibration
    c.d2h.link_bytes_per_second = 4'000'000'000;
    c.h2d.unlimited = true;
    c.d2h.unlimited = true;
    c.device_memory = {hbm->region()};
    c.host_memory = {host->region(), back->region()};  // the pinned sources and destinations
    c.on_chunk_issued = [this](const transfer_chunk_info& i) { log.add(i); };
    return c;
  }
  std::unique_ptr<device> dev;
  std::unique_ptr<buffer> hbm, host, back;
  issue_log log;  // outlives the engines the tests create
};

TEST_F(transfer_test, chunking_preserves_bytes_at_odd_sizes_and_chunk_boundaries) {
  transfer_engine eng(*dev, base_config());
  std::uint64_t seed = 7;
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, chunk - 1, chunk, chunk + 1, 3 * chunk + 5,
                        (std::size_t{1} << 20) + 13}) {
    for (std::size_t off : {std::size_t{0}, std::size_t{3}, chunk - 1}) {
      fill_pattern(host->ptr + off, n, ++seed);
      std::memset(back->ptr, 0, arena);
      const auto up = eng.submit(hbm->ptr + off, host->ptr + off, n, copy_direction::host_to_device,
                                 transfer_priority::prefetch);
      eng.wait(up);
      // D2D then D2H back, to exercise every direction's chunking.
      const auto mid = eng.submit(hbm->ptr + arena / 2 + off, hbm->ptr + off, n,
                                  copy_direction::device_to_device, transfer_priority::compaction);
      eng.wait(mid);
      const auto down = eng.submit(back->ptr + off, hbm->ptr + arena / 2 + off, n,
                                   copy_direction::device_to_host, transfer_priority::writeback);
      eng.wait(down);
      ASSERT_EQ(eng.status(down), transfer_status::complete);
      ASSERT_EQ(checksum(back->ptr + off, n), checksum(host->ptr + off, n))
          << "n=" << n << " off=" << off;
      ASSERT_EQ(back->ptr[off + n], 0) << "wrote past the end, n=" << n;  // arena is large enough
    }
  }
  // The chunk count of each request is ceil(bytes / chunk) and chunks are issued in order.
  for (const auto& c : log.snapshot()) {
    EXPECT_LT(c.chunk_index, c.chunk_count);
    EXPECT_LE(c.bytes, chunk);
  }
  const auto m = eng.metrics();
  EXPECT_GT(m.h2d.bytes, 0u);
  EXPECT_EQ(m.h2d.bytes, m.d2h.bytes);
  EXPECT_EQ(m.d2d.bytes, m.h2d.bytes);
}

TEST_F(transfer_test, a_fault_overtakes_queued_prefetches_after_at_most_the_in_flight_chunks) {
  transfer_engine eng(*dev, base_config());
  gate g;
  g.hold(*dev, eng.prefetch_stream());
  // 16 prefetch requests of 2 chunks pile up behind the gate.
  std::vector<transfer_ticket> pre;
  for (std::size_t i = 0; i < 16; ++i)
    pre.push_back(eng.submit(hbm->ptr + i * 2 * chunk, host->ptr + i * 2 * chunk, 2 * chunk,
                             copy_direction::host_to_device, transfer_priority::prefetch));
  ASSERT_TRUE(log.wait_for(3));  // the dispatcher has filled every in-flight slot
  EXPECT_EQ(eng.metrics().classes[1].queue_depth, 15u);  // the first is partly issued, still queued
  fill_pattern(host->ptr + arena - 3 * chunk, 3 * chunk, 99);
  const auto fault =
      eng.submit(hbm->ptr + arena - 3 * chunk, host->ptr + arena - 3 * chunk, 3 * chunk,
                 copy_direction::host_to_device, transfer_priority::fault);
  EXPECT_EQ(eng.status(fault), transfer_status::queued);
  g.open();
  eng.wait(fault);
  EXPECT_EQ(checksum(hbm->ptr + arena - 3 * chunk, 3 * chunk),
            checksum(host->ptr + arena - 3 * chunk, 3 * chunk));
  eng.drain();
  const auto order = log.snapshot();
  ASSERT_EQ(order.size(), 16u * 2 + 3);
  // Exactly the three chunks in flight went first, then all of the fault, then the prefetches in
  // submission order.
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(order[i].priority, transfer_priority::prefetch) << i;
  for (std::size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(order[i].request_id, fault.id) << i;
    EXPECT_EQ(order[i].chunk_index, i - 3);
  }
  std::uint64_t last_id = 0;
  std::size_t prefetch_chunks = 0;
  for (const auto& c : order) {
    if (c.priority != transfer_priority::prefetch) continue;
    EXPECT_GE(c.request_id, last_id) << "prefetches out of submission order";
    last_id = c.request_id;
    ++prefetch_chunks;
  }
  EXPECT_EQ(prefetch_chunks, 32u);
  const auto m = eng.metrics();
  EXPECT_EQ(m.classes[0].completed, 1u);
  EXPECT_EQ(m.classes[1].completed, 16u);
  EXPECT_EQ(m.classes[0].latency.count, 1u);
  EXPECT_GT(m.classes[0].latency.max_ns, 0u);
  EXPECT_GE(m.classes[1].latency.p99_ns, m.classes[1].latency.p50_ns);
  EXPECT_EQ(m.classes[1].queue_depth, 0u);
  ASSERT_TRUE(eng.latency(fault).has_value());
  EXPECT_GT(eng.latency(fault)->count(), 0);
}

TEST_F(transfer_test, priorities_rank_fault_prefetch_writeback_compaction) {
  transfer_engine eng(*dev, base_config());
  gate g;
  g.hold(*dev, eng.reduction_stream());
  // Fill the reduction stream's slots, then queue one of each class in reverse order.
  for (std::size_t i = 0; i < 3; ++i)
    eng.submit(back->ptr + i * chunk, hbm->ptr + i * chunk, chunk, copy_direction::device_to_host,
               transfer_priority::compaction);
  ASSERT_TRUE(log.wait_for(3));
  const auto comp = eng.submit(hbm->ptr + 4 * chunk, hbm->ptr, chunk,
                               copy_direction::device_to_device, transfer_priority::compaction);
  const auto wb = eng.submit(back->ptr + 5 * chunk, hbm->ptr, chunk, copy_direction::device_to_host,
                             transfer_priority::writeback);
  const auto pf = eng.submit(back->ptr + 6 * chunk, hbm->ptr, chunk, copy_direction::device_to_host,
                             transfer_priority::prefetch);
  const auto ft = eng.submit(back->ptr + 7 * chunk, hbm->ptr, chunk, copy_direction::device_to_host,
                             transfer_priority::fault);
  g.open();
  eng.drain();
  const auto order = log.snapshot();
  ASSERT_EQ(order.size(), 7u);
  EXPECT_EQ(order[3].request_id, ft.id);
  EXPECT_EQ(order[4].request_id, pf.id);
  EXPECT_EQ(order[5].request_id, wb.id);
  EXPECT_EQ(order[6].request_id, comp.id);
}

TEST_F(transfer_test, only_queued_requests_can_be_cancelled_and_they_copy_nothing) {
  transfer_engine eng(*dev, base_config());
  gate g;
  g.hold(*dev, eng.prefetch_stream());
  std::memset(hbm->ptr, 0x11, arena);
  fill_pattern(host->ptr, 8 * chunk, 5);
  std::vector<transfer_ticket> t;
  for (std::size_t i = 0; i < 8; ++i)
    t.push_back(eng.submit(hbm->ptr + i * chunk, host->ptr + i * chunk, chunk,
                           copy_direction::host_to_device, transfer_priority::prefetch));
  ASSERT_TRUE(log.wait_for(3));
  EXPECT_EQ(eng.status(t[0]), transfer_status::in_flight);
  EXPECT_FALSE(eng.cancel(t[0]));  // already issued
  EXPECT_EQ(eng.status(t[6]), transfer_status::queued);
  EXPECT_TRUE(eng.cancel(t[6]));
  EXPECT_EQ(eng.status(t[6]), transfer_status::cancelled);
  EXPECT_TRUE(eng.is_complete(t[6]));
  EXPECT_FALSE(eng.cancel(t[6]));  // twice
  EXPECT_FALSE(eng.latency(t[6]).has_value());
  // A stream waiting on a cancelled request is released, not stuck.
  stream compute(*dev);
  eng.wait_on(t[6], compute);
  g.open();
  eng.drain();
  compute.synchronize();
  for (std::size_t i = 0; i < 8; ++i) {
    if (i == 6) {
      EXPECT_TRUE(std::all_of(hbm->ptr + i * chunk, hbm->ptr + (i + 1) * chunk,
                              [](unsigned char b) { return b == 0x11; }))
          << "a cancelled request copied bytes";
    } else {
      EXPECT_EQ(eng.status(t[i]), transfer_status::complete);
      EXPECT_EQ(checksum(hbm->ptr + i * chunk, chunk), checksum(host->ptr + i * chunk, chunk)) << i;
    }
  }
  EXPECT_EQ(log.snapshot().size(), 7u);
  EXPECT_EQ(eng.metrics().classes[1].cancelled, 1u);
}

TEST_F(transfer_test, the_finished_queue_reports_each_finished_request_once) {
  for (const bool on : {true, false}) {
    auto c = base_config();
    c.finished_queue = on;
    transfer_engine eng(*dev, c);
    gate g;
    g.hold(*dev, eng.prefetch_stream());
    std::vector<transfer_ticket> t;
    for (std::size_t i = 0; i < 6; ++i)
      t.push_back(eng.submit(hbm->ptr + i * chunk, host->ptr + i * chunk, chunk,
                             copy_direction::host_to_device, transfer_priority::prefetch));
    EXPECT_TRUE(eng.take_finished().empty()) << "nothing has finished behind the gate";
    ASSERT_TRUE(eng.cancel(t[5]));  // still queued: finishes now, cancelled
    g.open();
    eng.drain();
    std::vector<std::uint64_t> got;
    for (const auto& f : eng.take_finished()) {
      // The outcome travels with the ticket (no later status query that may find it expired).
      EXPECT_EQ(f.status,
                f.ticket == t[5] ? transfer_status::cancelled : transfer_status::complete);
      got.push_back(f.ticket.id);
    }
    EXPECT_TRUE(eng.take_finished().empty()) << "a finished request is reported once";
    if (!on) {
      EXPECT_TRUE(got.empty())
          << "the queue is kept only when transfer_config::finished_queue is set";
      continue;
    }
    ASSERT_EQ(got.size(), t.size());
    EXPECT_EQ(got.front(), t[5].id) << "the cancelled request finished first";
    std::sort(got.begin(), got.end());
    for (std::size_t i = 0; i < t.size(); ++i) EXPECT_EQ(got[i], t[i].id);
  }
}

TEST_F(transfer_test, compute_stream_waits_for_a_request_not_yet_issued_without_the_host) {
  transfer_engine eng(*dev, base_config());
  gate g;
  g.hold(*dev, eng.prefetch_stream());
  for (std::size_t i = 0; i < 6; ++i)
    eng.submit(hbm->ptr + i * chunk, host->ptr + i * chunk, chunk, copy_direction::host_to_device,
               transfer_priority::prefetch);
  const std::size_t n = 2 * chunk + 100;
  unsigned char* dst = hbm->ptr + arena / 2;
  fill_pattern(host->ptr + arena / 2, n, 42);
  const auto t = eng.submit(dst, host->ptr + arena / 2, n, copy_direction::host_to_device,
                            transfer_priority::prefetch);
  ASSERT_TRUE(log.wait_for(3));
  ASSERT_EQ(eng.status(t), transfer_status::queued);  // its chunks cannot have been issued yet
  stream compute(*dev);
  std::atomic<bool> gate_opened{false};
  bool ran_after_gate = false;
  eng.wait_on(t, compute);  // returns at once: the host does not wait
  dev->launch_host_func([&] { ran_after_gate = gate_opened.load(); }, compute);
  auto* sum =
      static_cast<std::uint64_t*>(dev->allocate(memory_kind::pinned_host, sizeof(std::uint64_t)));
  dev->checksum_async(dst, n, sum, compute);
  gate_opened = true;
  g.open();
  compute.synchronize();
  EXPECT_TRUE(ran_after_gate);
  EXPECT_EQ(*sum, checksum(host->ptr + arena / 2, n)) << "the compute stream read before the copy";
  eng.wait(t);  // the stream saw the word before the completer saw the event: status lags
  EXPECT_EQ(eng.status(t), transfer_status::complete);
  dev->deallocate(memory_kind::pinned_host, sum, sizeof(std::uint64_t));
  // Waiting on a finished request is a no-op.
  eng.wait_on(t, compute);
  compute.synchronize();
}

TEST_F(transfer_test, a_late_prefetch_raised_to_fault_priority_overtakes_other_prefetches) {
  transfer_engine eng(*dev, base_config());
  gate g;
  g.hold(*dev, eng.prefetch_stream());
  std::vector<transfer_ticket> pre;
  for (std::size_t i = 0; i < 8; ++i)
    pre.push_back(eng.submit(hbm->ptr + i * 2 * chunk, host->ptr + i * 2 * chunk, 2 * chunk,
                             copy_direction::host_to_device, transfer_priority::prefetch));
  ASSERT_TRUE(log.wait_for(3));  // request 0 fully issued, request 1 partly: both in flight
  // The last prefetch is needed now.
  EXPECT_TRUE(eng.raise_priority(pre[7], transfer_priority::fault));
  EXPECT_FALSE(eng.raise_priority(pre[7], transfer_priority::prefetch));  // never lowers
  EXPECT_FALSE(eng.raise_priority(pre[0], transfer_priority::fault));     // nothing left to issue
  g.open();
  eng.drain();
  const auto order = log.snapshot();
  ASSERT_EQ(order.size(), 16u);
  // After the three chunks in flight, both chunks of the raised request, then the rest in order.
  EXPECT_EQ(order[3].request_id, pre[7].id);
  EXPECT_EQ(order[4].request_id, pre[7].id);
  EXPECT_EQ(order[3].priority, transfer_priority::fault);
  EXPECT_FALSE(eng.raise_priority(pre[7], transfer_priority::fault));  // finished
  EXPECT_EQ(eng.metrics().classes[0].completed, 1u);
  EXPECT_EQ(eng.metrics().classes[1].completed, 7u);
}

TEST_F(transfer_test, prefetches_issue_by_need_time_and_the_rest_in_submission_order) {
  auto c = base_config();
  c.max_deadline_wait = std::chrono::hours(1);  // no bound reached in this test
  transfer_engine eng(*dev, c);
  gate g;
  g.hold(*dev, eng.prefetch_stream());
  std::vector<transfer_ticket> pre;
  for (std::size_t i = 0; i < 8; ++i)
    pre.push_back(eng.submit(hbm->ptr + i * 2 * chunk, host->ptr + i * 2 * chunk, 2 * chunk,
                             copy_direction::host_to_device, transfer_priority::prefetch));
  ASSERT_TRUE(log.wait_for(3));  // request 0 fully issued, request 1 partly: in flight
  const auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(eng.set_need_time(pre[5], now + std::chrono::milliseconds(20)));
  EXPECT_TRUE(eng.set_need_time(pre[7], now + std::chrono::milliseconds(10)));
  EXPECT_FALSE(eng.set_need_time(pre[0], now)) << "nothing of request 0 is left to issue";
  g.open();
  eng.drain();
  const auto order = log.snapshot();
  ASSERT_EQ(order.size(), 16u);
  std::vector<std::uint64_t> ids;
  for (std::size_t i = 3; i < order.size(); ++i) ids.push_back(order[i].request_id);
  // After the chunks in flight: the one needed first, then the next, then the rest (request 1's
  // last chunk among them) in submission order.
  const std::vector<std::uint64_t> want{pre[7].id, pre[7].id, pre[5].id, pre[5].id, pre[1].id,
                                        pre[2].id, pre[2].id, pre[3].id, pre[3].id, pre[4].id,
                                        pre[4].id, pre[6].id, pre[6].id};
  EXPECT_EQ(ids, want);
  EXPECT_FALSE(eng.set_need_time(pre[7], now)) << "finished";
}

TEST_F(transfer_test, a_request_ordered_after_an_event_waits_for_it_on_the_device) {
  transfer_engine eng(*dev, base_config());
  stream compute(*dev);
  event read_done(*dev);
  gate g;
  // A "kernel" still reading the destination: the copy into it must wait for its release event.
  g.hold(*dev, compute);
  read_done.record(compute);
  const std::size_t n = 3 * chunk + 11;
  fill_pattern(host->ptr, n, 4711);
  const auto t = eng.submit(hbm->ptr, host->ptr, n, copy_direction::host_to_device,
                            transfer_priority::fault, {read_done.ref()});
  ASSERT_TRUE(log.wait_for(1));      // the first chunk is issued (behind the wait) ...
  EXPECT_FALSE(eng.is_complete(t));  // ... but cannot run before the kernel is done
  g.open();
  eng.wait(t);
  EXPECT_EQ(eng.status(t), transfer_status::complete);
  dev->copy_async(back->ptr, hbm->ptr, n, copy_direction::device_to_host, compute);
  compute.synchronize();
  EXPECT_EQ(checksum(back->ptr, n), checksum(host->ptr, n));
}

TEST_F(transfer_test, the_rate_cap_paces_the_engine_and_counts_token_waits) {
  auto c = base_config();
  c.h2d.unlimited = false;
  c.h2d.rate_bytes_per_second = 16 << 20;  // 16 MiB/s
  c.h2d.burst_bytes = chunk;
  transfer_engine eng(*dev, c);
  const std::size_t n = 8 * chunk;  // 512 KiB: at least 7/256 s once the burst is spent
  const auto t0 = token_bucket::steady_clock_ns();
  const auto t = eng.submit(hbm->ptr, host->ptr, n, copy_direction::host_to_device,
                            transfer_priority::prefetch);
  eng.wait(t);
  const auto elapsed = token_bucket::steady_clock_ns() - t0;
  const std::int64_t floor_ns =
      static_cast<std::int64_t>((n - chunk) * 1'000'000'000ull / (16 << 20));
  EXPECT_GE(elapsed, floor_ns);  // a lower bound correctness guarantees, not a timing threshold
  const auto m = eng.metrics();
  EXPECT_GT(m.h2d.token_wait_ns, 0u);
  EXPECT_EQ(m.h2d.rate_cap_bytes_per_second, 16u << 20);
  eng.set_rate(copy_direction::host_to_device, 1'000'000'000);
  EXPECT_EQ(eng.metrics().h2d.rate_cap_bytes_per_second, 1'000'000'000u);
  eng.set_unlimited(copy_direction::host_to_device);
  EXPECT_EQ(eng.metrics().h2d.rate_cap_bytes_per_second, 0u);
}

TEST_F(transfer_test, calibration_measures_the_link_and_caps_at_eighty_percent) {
  sim_config sc;
  sc.device_memory_bytes = 64 << 20;
  sc.h2d_bytes_per_second = 2'000'000'000;
  sc.d2h_bytes_per_second = 1'000'000'000;
  auto slow = make_sim_device(sc);
  transfer_config c;
  c.calibration_bytes = 2 << 20;
  c.calibration_repeats = 2;
  c.chunk_bytes = chunk;
  transfer_engine eng(*slow, c);
  const auto h2d = eng.link_peak(copy_direction::host_to_device);
  const auto d2h = eng.link_peak(copy_direction::device_to_host);
  EXPECT_GT(h2d, 0u);
  EXPECT_LE(h2d, 2'000'000'000u);  // a modelled link is never faster than its model
  EXPECT_LE(d2h, 1'000'000'000u);
  EXPECT_EQ(*eng.config().h2d.rate_bytes_per_second,
            static_cast<std::uint64_t>(static_cast<double>(h2d) * 0.8));
  EXPECT_EQ(eng.metrics().h2d.rate_cap_bytes_per_second, *eng.config().h2d.rate_bytes_per_second);
  EXPECT_EQ(eng.config().h2d.burst_bytes, 2 * chunk);
  // An explicit rate overrides the 80% default; a given link rate skips calibration.
  transfer_config c2 = c;
  c2.h2d.rate_bytes_per_second = 1'000'000'000;
  c2.h2d.link_bytes_per_second = 3'000'000'000;
  transfer_engine eng2(*slow, c2);
  EXPECT_EQ(eng2.link_peak(copy_direction::host_to_device), 3'000'000'000u);
  EXPECT_EQ(eng2.metrics().h2d.rate_cap_bytes_per_second, 1'000'000'000u);
}

TEST_F(transfer_test, bad_requests_are_typed_errors_and_issue_nothing) {
  transfer_engine eng(*dev, base_config());
  const auto h2d = copy_direction::host_to_device;
  const auto pf = transfer_priority::prefetch;
  EXPECT_THROW(eng.submit(nullptr, host->ptr, 16, h2d, pf), invalid_argument);
  EXPECT_THROW(eng.submit(hbm->ptr, nullptr, 16, h2d, pf), invalid_argument);
  EXPECT_THROW(eng.submit(hbm->ptr, host->ptr, 0, h2d, pf), invalid_argument);
  EXPECT_THROW(eng.submit(hbm->ptr + 8, hbm->ptr, 16, copy_direction::device_to_device, pf),
               invalid_argument);
  EXPECT_THROW(eng.submit(back->ptr, host->ptr, 16, copy_direction::host_to_host, pf),
               invalid_argument);
  // Destinations outside the memory the engine was given.
  EXPECT_THROW(eng.submit(hbm->ptr + arena - 8, host->ptr, 16, h2d, pf),
               invalid_argument);                                                 // overruns
  EXPECT_THROW(eng.submit(back->ptr, host->ptr, 16, h2d, pf), invalid_argument);  // host as device
  std::vector<unsigned char> plain(64);  // pageable: on cuda its copy would be synchronous
  EXPECT_THROW(eng.submit(plain.data(), hbm->ptr, 16, copy_direction::device_to_host, pf),
               invalid_argument);
  // Sources outside it: a pageable host source, host memory as a device source.
  try {
    eng.submit(hbm->ptr, plain.data(), 16, h2d, pf);
    ADD_FAILURE() << "a pageable source was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("source"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pinned host"), std::string::npos) << e.what();
  }
  EXPECT_THROW(eng.submit(back->ptr, host->ptr, 16, copy_direction::device_to_host, pf),
               invalid_argument);
  EXPECT_THROW(eng.submit(hbm->ptr, host->ptr, 16, h2d, static_cast<transfer_priority>(9)),
               invalid_argument);
  EXPECT_THROW(eng.set_rate(h2d, 0), invalid_argument);
  EXPECT_THROW(eng.set_rate(copy_direction::device_to_device, 1000), invalid_argument);
  EXPECT_THROW(eng.status(transfer_ticket{12345}), invalid_argument);
  EXPECT_THROW(eng.status(transfer_ticket{}), invalid_argument);
  EXPECT_THROW(eng.cancel(transfer_ticket{12345}), invalid_argument);
  EXPECT_THROW(eng.wait(transfer_ticket{12345}), invalid_argument);
  stream s(*dev);
  EXPECT_THROW(eng.wait_on(transfer_ticket{12345}, s), invalid_argument);
  const auto m = eng.metrics();
  for (const auto& k : m.classes) EXPECT_EQ(k.submitted, 0u);
  EXPECT_TRUE(log.snapshot().empty());
  const auto ok = eng.submit(hbm->ptr, host->ptr, 16, h2d, pf);  // still works afterwards
  EXPECT_THROW(eng.wait_on(ok, stream_ref{}), invalid_argument);
  eng.wait(ok);
}

TEST_F(transfer_test, bad_configs_are_typed_errors) {
  auto with = [&](auto change) {
    auto c = base_config();
    change(c);
    return c;
  };
  EXPECT_THROW(transfer_engine(*dev, with([](transfer_config& c) { c.chunk_bytes = 0; })),
               invalid_argument);
  EXPECT_THROW(transfer_engine(*dev, with([](transfer_config& c) { c.max_in_flight_chunks = 0; })),
               invalid_argument);
  EXPECT_THROW(
      transfer_engine(*dev, with([](transfer_config& c) { c.h2d.rate_bytes_per_second = 0; })),
      invalid_argument);
  EXPECT_THROW(
      transfer_engine(*dev, with([](transfer_config& c) { c.d2h.burst_bytes = chunk - 1; })),
      invalid_argument);
  EXPECT_THROW(
      transfer_engine(*dev, with([](transfer_config& c) { c.default_cap_fraction = 1.5; })),
      invalid_argument);
  EXPECT_THROW(
      transfer_engine(*dev, with([](transfer_config& c) { c.d2h.link_bytes_per_second = 0; })),
      invalid_argument);
}

TEST_F(transfer_test, a_chunk_the_device_rejects_fails_the_request_and_releases_waiters) {
  // A region that is not device memory: the engine accepts the destination, the device refuses it.
  std::vector<unsigned char> not_hbm(4 * chunk);
  auto c = base_config();
  c.device_memory.push_back({not_hbm.data(), not_hbm.size()});
  transfer_engine eng(*dev, c);
  const auto t = eng.submit(not_hbm.data(), host->ptr, 2 * chunk, copy_direction::host_to_device,
                            transfer_priority::fault);
  stream compute(*dev);
  eng.wait_on(t, compute);
  EXPECT_THROW(eng.wait(t), logic_error);
  EXPECT_EQ(eng.status(t), transfer_status::failed);
  compute.synchronize();  // released, not stuck
  EXPECT_EQ(eng.metrics().classes[0].failed, 1u);
  const auto ok = eng.submit(hbm->ptr, host->ptr, chunk, copy_direction::host_to_device,
                             transfer_priority::fault);
  eng.wait(ok);
  EXPECT_EQ(eng.status(ok), transfer_status::complete);
}

TEST_F(transfer_test, more_requests_live_than_reserved_words_grow_the_pool_and_all_complete) {
  // The engine reserves 4 blocks of value words; past them it pins another block with its lock
  // dropped. 5,000 requests held behind a gate are live at once, then all complete.
  transfer_engine eng(*dev, base_config());
  std::vector<transfer_ticket> ts;
  {
    gate g;
    g.hold(*dev, eng.prefetch_stream());
    for (std::size_t i = 0; i < 5000; ++i) {
      ts.push_back(eng.submit(hbm->ptr + (i % 64) * 64, host->ptr + (i % 64) * 64, 64,
                              copy_direction::host_to_device, transfer_priority::prefetch));
    }
  }
  for (const auto& t : ts) eng.wait(t);
  EXPECT_EQ(eng.metrics().classes[static_cast<std::size_t>(transfer_priority::prefetch)].completed,
            5000u);
}

TEST_F(transfer_test, destruction_cancels_queued_requests_and_finishes_issued_ones) {
  std::memset(hbm->ptr, 0x22, arena);
  fill_pattern(host->ptr, 32 * chunk, 11);
  {
    transfer_engine eng(*dev, base_config());
    gate g;
    g.hold(*dev, eng.prefetch_stream());
    for (std::size_t i = 0; i < 32; ++i)
      eng.submit(hbm->ptr + i * chunk, host->ptr + i * chunk, chunk, copy_direction::host_to_device,
                 transfer_priority::prefetch);
    ASSERT_TRUE(log.wait_for(3));
    g.open();
  }  // the destructor returns only once everything issued has landed
  const auto issued = log.snapshot();
  EXPECT_GE(issued.size(), 3u);
  std::vector<bool> was_issued(33, false);
  for (const auto& c : issued) was_issued[c.request_id] = true;
  for (std::size_t i = 0; i < 32; ++i) {
    if (was_issued[i + 1]) {
      EXPECT_EQ(checksum(hbm->ptr + i * chunk, chunk), checksum(host->ptr + i * chunk, chunk)) << i;
    } else {
      EXPECT_EQ(hbm->ptr[i * chunk], 0x22) << i;
    }
  }
}

TEST_F(transfer_test, many_threads_submit_and_wait_concurrently) {
  auto c = base_config();
  c.h2d.unlimited = false;
  c.h2d.rate_bytes_per_second = 2'000'000'000;
  transfer_engine eng(*dev, c);
  fill_pattern(host->ptr, arena, 3);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (std::size_t i = 0; i < 8; ++i) {
        const std::size_t off = (static_cast<std::size_t>(k) * 8 + i) * (arena / 32);
        const auto p = i % 2 ? transfer_priority::fault : transfer_priority::prefetch;
        const auto t = eng.submit(hbm->ptr + off, host->ptr + off, arena / 32 - 5,
                                  copy_direction::host_to_device, p);
        if (i % 3 == 0) eng.cancel(t);
        eng.wait(t);
      }
    });
  }
  for (auto& t : threads) t.join();
  eng.drain();
  const auto m = eng.metrics();
  std::uint64_t done = 0;
  for (const auto& k : m.classes) done += k.completed + k.cancelled;
  EXPECT_EQ(done, 32u);
}

}  // namespace
}  // namespace htp::test
