// The token bucket in virtual time: an injected clock, no sleeps, exact byte counts.
#include <htp/error.hpp>
#include <htp/token_bucket.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <utility>

namespace htp::test {
namespace {

constexpr std::int64_t second = 1'000'000'000;

struct virtual_clock {
  std::int64_t now = 1000;
  token_bucket::clock_fn fn() {
    return [this] { return now; };
  }
};

TEST(token_bucket, starts_full_and_refuses_more_than_it_holds) {
  virtual_clock c;
  token_bucket b(1000, 500, c.fn());
  EXPECT_EQ(b.available(), 500u);
  EXPECT_TRUE(b.try_take(300));
  EXPECT_FALSE(b.try_take(201));  // 200 left
  EXPECT_TRUE(b.try_take(200));
  EXPECT_EQ(b.available(), 0u);
  EXPECT_FALSE(b.try_take(1));
  EXPECT_TRUE(b.try_take(0));
  EXPECT_EQ(b.total_taken(), 500u);
}

TEST(token_bucket, refills_at_the_rate_and_stops_at_the_burst) {
  virtual_clock c;
  token_bucket b(1000, 500, c.fn());  // 1 byte per ms
  ASSERT_TRUE(b.try_take(500));
  c.now += 1'000'000 * 7;  // 7 ms
  EXPECT_EQ(b.available(), 7u);
  c.now += 10 * second;
  EXPECT_EQ(b.available(), 500u);  // capped at the burst
}

TEST(token_bucket, carries_the_fraction_of_a_byte_so_nothing_is_lost) {
  virtual_clock c;
  // 3 bytes per second read every 100 ms: each read earns 0.3 bytes, which truncation would lose.
  token_bucket b(3, 100, c.fn());
  ASSERT_TRUE(b.try_take(100));
  for (int i = 0; i < 100; ++i) {
    c.now += second / 10;
    (void)b.available();
  }
  EXPECT_EQ(b.available(), 30u);  // exactly 10 s x 3 B/s
}

TEST(token_bucket, time_until_available_is_exact) {
  virtual_clock c;
  token_bucket b(3, 100, c.fn());
  ASSERT_TRUE(b.try_take(100));
  c.now += 100'000'000;                              // 0.3 bytes earned
  const std::int64_t t = b.time_until_available(2);  // 1.7 bytes more = 566666666.67 ns -> ceil
  EXPECT_EQ(t, 566'666'667);
  c.now += t - 1;
  EXPECT_FALSE(b.try_take(2));
  c.now += 1;
  EXPECT_TRUE(b.try_take(2));
  EXPECT_EQ(b.time_until_available(0), 0);
}

TEST(token_bucket,
     greedy_consumer_gets_the_rate_within_one_percent_and_never_exceeds_cap_plus_burst) {
  for (std::uint64_t rate :
       {std::uint64_t{1'000'000'000}, std::uint64_t{12'345'678'901}, std::uint64_t{333'333'333}}) {
    virtual_clock c;
    const std::uint64_t chunk = 2 << 20;
    const std::uint64_t burst = 2 * chunk;
    token_bucket b(rate, burst, c.fn());
    std::deque<std::pair<std::int64_t, std::uint64_t>> takes;  // (time, bytes)
    const std::int64_t start = c.now;
    const std::int64_t end = start + 10 * second;
    std::uint64_t total = 0;
    while (c.now < end) {
      const std::int64_t wait = b.time_until_available(chunk);
      c.now += wait + 17;  // a consumer that always wakes a little late
      ASSERT_TRUE(b.try_take(chunk));
      takes.emplace_back(c.now, chunk);
      total += chunk;
    }
    // Every one-second window: at most rate + burst; at least 99% of rate once past the burst.
    // A sliding window over the takes: [i, j) are those in [takes[i].time, takes[i].time + 1 s).
    std::uint64_t in_window = 0;
    for (std::size_t i = 0, j = 0; i < takes.size(); in_window -= takes[i].second, ++i) {
      for (; j < takes.size() && takes[j].first < takes[i].first + second; ++j)
        in_window += takes[j].second;
      EXPECT_LE(in_window, rate + burst) << "rate " << rate << " window at " << takes[i].first;
      if (takes[i].first + second <= takes.back().first) {
        EXPECT_GE(static_cast<double>(in_window), 0.99 * static_cast<double>(rate))
            << "rate " << rate << " window at " << takes[i].first;
      }
    }
    const double achieved =
        static_cast<double>(total - burst) * 1e9 / static_cast<double>(c.now - start);
    EXPECT_NEAR(achieved / static_cast<double>(rate), 1.0, 0.01) << rate;
    EXPECT_EQ(b.total_taken(), total);
  }
}

TEST(token_bucket, rate_change_keeps_what_was_earned) {
  virtual_clock c;
  token_bucket b(1000, 10'000, c.fn());
  ASSERT_TRUE(b.try_take(10'000));
  c.now += second;  // 1000 earned at the old rate
  b.set_rate(2000);
  EXPECT_EQ(b.rate(), 2000u);
  c.now += second;  // 2000 more at the new one
  EXPECT_EQ(b.available(), 3000u);
}

TEST(token_bucket, unlimited_mode_never_waits_and_leaving_it_starts_full) {
  virtual_clock c;
  token_bucket b(1, 10, c.fn());
  ASSERT_TRUE(b.try_take(10));
  b.set_unlimited(true);
  EXPECT_TRUE(b.unlimited());
  EXPECT_EQ(b.time_until_available(1'000'000), 0);
  EXPECT_TRUE(b.try_take(1'000'000));  // more than the burst is fine when unlimited
  b.set_unlimited(false);
  EXPECT_EQ(b.available(), 10u);
  EXPECT_THROW(b.try_take(11), invalid_argument);  // limited again: the burst applies
}

TEST(token_bucket, a_clock_that_steps_back_earns_nothing) {
  virtual_clock c;
  token_bucket b(1000, 1000, c.fn());
  ASSERT_TRUE(b.try_take(1000));
  c.now -= second;
  EXPECT_EQ(b.available(), 0u);
}

TEST(token_bucket, bad_arguments_are_typed_errors) {
  virtual_clock c;
  EXPECT_THROW(token_bucket(0, 10, c.fn()), invalid_argument);
  EXPECT_THROW(token_bucket(10, 0, c.fn()), invalid_argument);
  EXPECT_THROW(token_bucket(10, 10, token_bucket::clock_fn{}), invalid_argument);
  token_bucket b(10, 10, c.fn());
  EXPECT_THROW(b.try_take(11), invalid_argument);
  EXPECT_THROW(b.time_until_available(11), invalid_argument);
  EXPECT_THROW(b.set_rate(0), invalid_argument);
  EXPECT_THROW(b.set_burst(0), invalid_argument);
  EXPECT_EQ(b.rate(), 10u);  // unchanged by the failed calls
  b.set_burst(4);
  EXPECT_EQ(b.available(), 4u);
}

TEST(token_bucket, real_clock_default_works) {
  token_bucket b(1'000'000, 100);
  EXPECT_TRUE(b.try_take(100));
  EXPECT_GT(token_bucket::steady_clock_ns(), 0);
}

}  // namespace
}  // namespace htp::test
