// The transfer engine's per-class queue (src/transfer/deadline_queue.hpp), on a virtual clock:
// times are plain numbers, so the order and the starvation bound are exact.
#include "transfer/deadline_queue.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace htp::test {
namespace {

using detail::deadline_key;
using detail::deadline_queue;
using detail::issue_key;
using detail::no_need;

constexpr std::int64_t max_wait = 100;

TEST(deadline_queue, an_imminent_request_overtakes_a_distant_one) {
  deadline_queue<int> q;
  q.push({issue_key(0, 90, max_wait), 1}, 1);       // needed at 90
  q.push({issue_key(1, 5, max_wait), 2}, 2);        // needed at 5: goes first
  q.push({issue_key(2, no_need, max_wait), 3}, 3);  // no need time: key 102
  q.push({issue_key(3, 40, max_wait), 4}, 4);
  std::vector<int> order;
  for (; !q.empty(); q.pop()) order.push_back(q.front());
  EXPECT_EQ(order, (std::vector<int>{2, 4, 1, 3}));
}

TEST(deadline_queue, without_need_times_the_order_is_arrival) {
  deadline_queue<int> q;
  for (int i = 0; i < 10; ++i) q.push({issue_key(i, no_need, max_wait), std::uint64_t(i)}, i);
  std::vector<int> order;
  for (; !q.empty(); q.pop()) order.push_back(q.front());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(deadline_queue, a_distant_request_is_not_starved_by_a_stream_of_imminent_ones) {
  // At t = 0 a request needed at t = 10^9 arrives behind three others; then at every tick one new
  // request needed 5 ticks later arrives and one request is issued. Without the bound it would
  // wait forever; with it, its key is 0 + max_wait, and only the requests that arrived before
  // that can go first.
  deadline_queue<std::int64_t> q;
  std::uint64_t arrival = 0;
  for (int i = 0; i < 3; ++i) q.push({issue_key(0, 5, max_wait), arrival++}, -1);
  q.push({issue_key(0, 1'000'000'000, max_wait), arrival++}, 0);  // the distant one, value 0
  std::int64_t issued_at = -1;
  for (std::int64_t t = 1; t < 10'000 && issued_at < 0; ++t) {
    q.push({issue_key(t, t + 5, max_wait), arrival++}, t);
    if (q.front() == 0) issued_at = t;
    q.pop();
  }
  ASSERT_GE(issued_at, 0) << "the distant request was never issued";
  // Issued once every request keyed before 100 was: the three earlier ones and those that
  // arrived at t < 95 (key t + 5 < 100). One leaves per tick, so at tick 98 at the latest.
  EXPECT_LE(issued_at, max_wait);
  EXPECT_GE(issued_at, 90) << "it went before requests that were needed sooner";
}

TEST(deadline_queue, erase_and_rekey_take_a_request_out_of_its_place) {
  deadline_queue<int> q;
  const deadline_key a{issue_key(0, 50, max_wait), 1}, b{issue_key(0, 60, max_wait), 2};
  q.push(a, 1);
  q.push(b, 2);
  EXPECT_TRUE(q.erase(a));
  EXPECT_FALSE(q.erase(a));
  EXPECT_EQ(q.front(), 2);
  q.erase(b);
  q.push({issue_key(0, 10, max_wait), 2}, 2);  // its need came closer
  q.push({issue_key(0, 20, max_wait), 3}, 3);
  EXPECT_EQ(q.front(), 2);
  EXPECT_EQ(q.size(), 2u);
  q.erase_if([](int v) { return v == 2; });
  EXPECT_EQ(q.front(), 3);
}

TEST(deadline_queue, keys_saturate_instead_of_overflowing) {
  EXPECT_EQ(issue_key(no_need - 10, no_need, max_wait), no_need);
  EXPECT_EQ(issue_key(0, no_need, no_need), no_need);
  EXPECT_EQ(issue_key(7, no_need, max_wait), 107);
}

}  // namespace
}  // namespace htp::test
