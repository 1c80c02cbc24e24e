// A link shared by two GPUs' transfer engines (two sim devices): its cap holds across them, and a
// fault on one GPU goes before a prefetch on the other. The link runs on a virtual clock the test
// advances, so "how many chunks crossed" is exact; waits are on the engines' state, never sleeps.
#include "deadline.hpp"

#include <htp/error.hpp>
#include <htp/shared_link.hpp>
#include <htp/sim_device.hpp>
#include <htp/transfer_engine.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace htp::test {
namespace {

constexpr std::size_t chunk = 64 << 10;
constexpr std::uint64_t rate = 1'000'000'000;                      // 1 GB/s on the virtual clock
constexpr std::int64_t chunk_ns = chunk * 1'000'000'000LL / rate;  // 65,536 ns per chunk

struct virtual_clock {
  std::atomic<std::int64_t> now{1'000'000};
  token_bucket::clock_fn fn() {
    return [this] { return now.load(); };
  }
};

/// Chunks issued by every engine, in order: (gpu, priority).
struct crossing_log {
  std::mutex mutex;
  std::vector<std::pair<int, transfer_priority>> chunks;
  void add(int gpu, transfer_priority p) {
    std::lock_guard lock(mutex);
    chunks.emplace_back(gpu, p);
  }
  std::vector<std::pair<int, transfer_priority>> snapshot() {
    std::lock_guard lock(mutex);
    return chunks;
  }
};

/// Advances the clock a chunk at a time until the request has finished (the bucket holds at most
/// its burst, so one big step would let only that much through); fails after hang_limit.
::testing::AssertionResult drain(virtual_clock& clock, transfer_engine& e, transfer_ticket t) {
  ::testing::AssertionResult finished = wait_until(
      [&] {
        const transfer_status s = e.status(t);
        if (s != transfer_status::queued && s != transfer_status::in_flight) return true;
        clock.now += chunk_ns;
        return false;
      },
      "a drained request finishing");
  if (finished) e.wait(t);
  return finished;
}

struct gpu {
  std::unique_ptr<device> dev;
  unsigned char* hbm = nullptr;
  unsigned char* host = nullptr;
  std::unique_ptr<transfer_engine> engine;
  static constexpr std::size_t arena = 4 << 20;
  gpu(int index, std::shared_ptr<shared_link> link, crossing_log& log) {
    sim_config c;
    c.device_memory_bytes = 16 << 20;
    c.ordinal = index;
    dev = make_sim_device(c);
    hbm = static_cast<unsigned char*>(dev->allocate(memory_kind::device, arena));
    host = static_cast<unsigned char*>(dev->allocate(memory_kind::pinned_host, arena));
    transfer_config t;
    t.chunk_bytes = chunk;
    t.h2d.link_bytes_per_second = 4'000'000'000;  // skip calibration
    t.d2h.link_bytes_per_second = 4'000'000'000;
    t.h2d.unlimited = true;  // the per-GPU cap never binds: the shared link is under test
    t.d2h.unlimited = true;
    t.h2d.upstream = std::move(link);
    t.device_memory = {{hbm, arena}};
    t.host_memory = {{host, arena}};
    t.on_chunk_issued = [&log, index](const transfer_chunk_info& i) { log.add(index, i.priority); };
    engine = std::make_unique<transfer_engine>(*dev, t);
  }
  ~gpu() {
    engine.reset();
    dev->deallocate(memory_kind::device, hbm, arena);
    dev->deallocate(memory_kind::pinned_host, host, arena);
  }
  transfer_ticket load(std::size_t chunks, std::size_t offset_chunks, transfer_priority p) {
    return engine->submit(hbm + offset_chunks * chunk, host + offset_chunks * chunk, chunks * chunk,
                          copy_direction::host_to_device, p);
  }
};

TEST(shared_link, two_gpus_together_never_cross_faster_than_the_shared_cap) {
  virtual_clock clock;
  auto link = std::make_shared<shared_link>("switch0", rate, 2 * chunk, clock.fn());
  crossing_log log;
  gpu a(0, link, log), b(1, link, log);
  // More than the test lets through, so neither engine runs out of chunks while it watches.
  const transfer_ticket ta = a.load(16, 0, transfer_priority::prefetch);
  const transfer_ticket tb = b.load(16, 0, transfer_priority::prefetch);
  // The burst lets two chunks through; then both engines wait on the link.
  ASSERT_TRUE(wait_until([&] { return link->waiting(transfer_priority::prefetch) == 2; },
                         "both engines waiting on the link"));
  EXPECT_EQ(log.snapshot().size(), 2u);
  for (std::size_t step = 1; step <= 6; ++step) {
    clock.now += chunk_ns;  // exactly one more chunk's tokens
    ASSERT_TRUE(wait_until(
        [&] {
          return log.snapshot().size() == 2 + step &&
                 link->waiting(transfer_priority::prefetch) == 2;
        },
        "one more chunk crossing, both engines waiting again"))
        << "step " << step << ": " << log.snapshot().size() << " chunks";
  }
  EXPECT_EQ(link->bytes_taken(), 8 * chunk) << "burst + elapsed x rate, over both GPUs together";
  EXPECT_TRUE(drain(clock, *a.engine, ta));  // let the rest through
  EXPECT_TRUE(drain(clock, *b.engine, tb));
}

TEST(shared_link, a_fault_on_one_gpu_goes_before_a_prefetch_on_the_other) {
  virtual_clock clock;
  auto link = std::make_shared<shared_link>("numa0", rate, 2 * chunk, clock.fn());
  crossing_log log;
  gpu a(0, link, log), b(1, link, log);
  const transfer_ticket ta =
      a.load(16, 0, transfer_priority::prefetch);  // GPU 0 streams a long prefetch
  ASSERT_TRUE(wait_until([&] { return link->waiting(transfer_priority::prefetch) == 1; },
                         "GPU 0's prefetch waiting on the link"));
  ASSERT_EQ(log.snapshot().size(), 2u);
  const transfer_ticket tb = b.load(2, 0, transfer_priority::fault);  // GPU 1 faults meanwhile
  ASSERT_TRUE(wait_until([&] { return link->waiting(transfer_priority::fault) == 1; },
                         "GPU 1's fault waiting on the link"));
  for (int k = 1; k <= 2; ++k) {
    // The fault's next chunk waits on the link before its tokens appear.
    ASSERT_TRUE(wait_until([&] { return link->waiting(transfer_priority::fault) == 1; },
                           "the fault's next chunk waiting on the link"));
    clock.now += chunk_ns;
    ASSERT_TRUE(
        wait_until([&] { return log.snapshot().size() == 2u + static_cast<std::size_t>(k); },
                   "the fault's chunk crossing"))
        << "chunk " << k;
    const auto c = log.snapshot().back();
    EXPECT_EQ(c.first, 1) << "chunk " << k << " of the fault";
    EXPECT_EQ(c.second, transfer_priority::fault);
  }
  ASSERT_TRUE(wait_until([&] { return link->waiting(transfer_priority::fault) == 0; },
                         "the fault leaving the link's queue"));
  clock.now += chunk_ns;  // the fault is through: the prefetch resumes
  ASSERT_TRUE(wait_until([&] { return log.snapshot().size() == 5u; }, "the prefetch resuming"));
  EXPECT_EQ(log.snapshot().back().first, 0);
  EXPECT_TRUE(drain(clock, *a.engine, ta));
  EXPECT_TRUE(drain(clock, *b.engine, tb));
}

// Two levels: GPUs 0 and 1 under switch0, GPU 2 straight under numa0, which switch0 sits in.
// numa0 earns two chunks per step and GPU 2 alone could use them all, so numa0 is always spent;
// switch0's two GPUs together never pass more than switch0's own cap.
TEST(shared_link, nested_links_cap_every_level_at_once) {
  virtual_clock clock;
  auto numa = std::make_shared<shared_link>("numa0", 2 * rate, 4 * chunk, clock.fn());
  auto sw = std::make_shared<shared_link>("switch0", rate, 2 * chunk, clock.fn(), numa);
  crossing_log log;
  gpu a(0, sw, log), b(1, sw, log), c(2, numa, log);
  const transfer_ticket ta = a.load(24, 0, transfer_priority::prefetch);
  const transfer_ticket tb = b.load(24, 0, transfer_priority::prefetch);
  const transfer_ticket tc = c.load(24, 0, transfer_priority::prefetch);
  for (std::size_t step = 0; step <= 6; ++step) {
    if (step > 0) clock.now += chunk_ns;
    const std::uint64_t numa_cap = (4 + 2 * step) * chunk;  // burst + elapsed x rate
    // Every issued chunk crossed numa0 (the log is written just after the tokens are taken).
    ASSERT_TRUE(wait_until(
        [&] {
          return numa->bytes_taken() == numa_cap && log.snapshot().size() * chunk == numa_cap;
        },
        "numa0 passing its burst plus the elapsed time's tokens"))
        << "step " << step << ": numa0 passed " << numa->bytes_taken() / chunk << " chunks, "
        << log.snapshot().size() << " issued";
    EXPECT_LE(sw->bytes_taken(), (2 + step) * chunk) << "step " << step << ": switch0 over its cap";
  }
  std::size_t under_switch = 0;
  for (const auto& [g, p] : log.snapshot()) under_switch += g != 2 ? 1 : 0;
  EXPECT_EQ(sw->bytes_taken(), under_switch * chunk)
      << "a chunk takes switch0's tokens only when it crosses";
  EXPECT_TRUE(drain(clock, *a.engine, ta));
  EXPECT_TRUE(drain(clock, *b.engine, tb));
  EXPECT_TRUE(drain(clock, *c.engine, tc));
}

// The chain is taken whole or not at all, and a waiter counts at every level up to the one that
// holds it back: a fault under one switch, waiting for the NUMA link, holds back a prefetch under
// another switch whose own switch has tokens.
TEST(shared_link,
     a_chain_is_taken_whole_and_a_fault_under_one_switch_goes_before_a_prefetch_under_another) {
  virtual_clock clock;
  auto numa = std::make_shared<shared_link>("numa0", rate, chunk, clock.fn());
  auto sw0 = std::make_shared<shared_link>("switch0", rate, 4 * chunk, clock.fn(), numa);
  auto sw1 = std::make_shared<shared_link>("switch1", rate, 4 * chunk, clock.fn(), numa);
  EXPECT_EQ(sw0->chain_burst(), chunk);
  shared_link::waiter prefetcher, faulter;
  ASSERT_EQ(sw0->take_or_wait(chunk, transfer_priority::prefetch, prefetcher), 0);
  EXPECT_GT(sw0->take_or_wait(chunk, transfer_priority::prefetch, prefetcher), 0)
      << "numa0 is empty";
  EXPECT_EQ(sw0->bytes_taken(), chunk) << "nothing taken from switch0 when numa0 refused";
  EXPECT_EQ(sw0->waiting(transfer_priority::prefetch), 1u);
  EXPECT_EQ(numa->waiting(transfer_priority::prefetch), 1u);
  EXPECT_GT(sw1->take_or_wait(chunk, transfer_priority::fault, faulter), 0);
  EXPECT_EQ(numa->waiting(transfer_priority::fault), 1u);
  EXPECT_EQ(sw1->waiting(transfer_priority::fault), 1u);
  clock.now += chunk_ns;  // one chunk's tokens on numa0
  EXPECT_GT(sw0->take_or_wait(chunk, transfer_priority::prefetch, prefetcher), 0)
      << "the fault waits for numa0: the prefetch must not take its tokens";
  EXPECT_EQ(sw1->take_or_wait(chunk, transfer_priority::fault, faulter), 0);
  EXPECT_EQ(numa->waiting(transfer_priority::fault), 0u);
  EXPECT_EQ(sw1->waiting(transfer_priority::fault), 0u);
  clock.now += chunk_ns;
  EXPECT_EQ(sw0->take_or_wait(chunk, transfer_priority::prefetch, prefetcher), 0)
      << "the fault is through";
  EXPECT_EQ(numa->bytes_taken(), 3 * chunk);
  EXPECT_EQ(sw0->bytes_taken(), 2 * chunk);
  EXPECT_EQ(sw1->bytes_taken(), chunk);
  sw0->take_or_wait(chunk, transfer_priority::prefetch, prefetcher);  // waits again (numa0 empty)
  sw0->withdraw(prefetcher);
  EXPECT_EQ(sw0->waiting(transfer_priority::prefetch), 0u);
  EXPECT_EQ(numa->waiting(transfer_priority::prefetch), 0u) << "withdraw clears every level";
}

TEST(shared_link, a_chain_longer_than_max_chain_is_refused) {
  std::shared_ptr<shared_link> top = std::make_shared<shared_link>("l0", rate, chunk);
  for (std::size_t k = 1; k < shared_link::max_chain; ++k) {
    top = std::make_shared<shared_link>("l" + std::to_string(k), rate, chunk,
                                        &token_bucket::steady_clock_ns, top);
  }
  EXPECT_THROW(shared_link("too deep", rate, chunk, &token_bucket::steady_clock_ns, top),
               invalid_argument);
}

TEST(shared_link, a_burst_smaller_than_a_chunk_is_refused_naming_the_field) {
  auto link = std::make_shared<shared_link>("tiny", rate, chunk / 2);
  sim_config c;
  auto dev = make_sim_device(c);
  transfer_config t;
  t.chunk_bytes = chunk;
  t.h2d.link_bytes_per_second = 4'000'000'000;
  t.d2h.link_bytes_per_second = 4'000'000'000;
  t.h2d.upstream = link;
  try {
    transfer_engine e(*dev, t);
    FAIL() << "accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("upstream"), std::string::npos) << e.what();
  }
  EXPECT_THROW(shared_link("zero", 0, chunk), invalid_argument);
  // A link above the engine's own one with too small a burst is refused as well.
  auto thin_parent = std::make_shared<shared_link>("thin", rate, chunk / 2);
  t.h2d.upstream = std::make_shared<shared_link>("wide", rate, 4 * chunk,
                                                 &token_bucket::steady_clock_ns, thin_parent);
  EXPECT_THROW(transfer_engine(*dev, t), invalid_argument);
}

}  // namespace
}  // namespace htp::test
