// A link whose budget lives in a link cell (the form a node's shared tier keeps it in, so that
// several processes draw from one budget). Two links over one cell with different slots stand for
// two processes: the cell's word and counts are all they share, exactly as across processes. The
// cells run on a virtual clock the tests move (a script of readings where a test needs a reading
// to change between the look and the take, as another process's take would).
#include <htp/detail/link_cell.hpp>
#include <htp/error.hpp>
#include <htp/shared_link.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>

namespace htp::test {
namespace {

constexpr std::uint64_t rate = 1'000'000'000;  // 1 GB/s: a byte a nanosecond
constexpr std::uint64_t burst = 1 << 20;

std::atomic<std::int64_t> now_ns{1'000'000'000};
std::mutex script_mutex;
std::deque<std::int64_t> script;  // readings to return first, in order

std::int64_t virtual_now() noexcept {
  std::lock_guard lock(script_mutex);
  if (script.empty()) return now_ns.load();
  const std::int64_t t = script.front();
  script.pop_front();
  return t;
}

std::shared_ptr<shared_link> link_of(detail::link_cell& cell, std::size_t slot,
                                     std::shared_ptr<const void> owner) {
  return detail::make_cell_link(cell, slot, std::move(owner), &virtual_now);
}

/// A zero-filled (free) cell, as a fresh tier holds it.
std::shared_ptr<detail::link_cell> free_cell() {
  auto storage = std::make_shared<detail::link_cell>();
  std::memset(static_cast<void*>(storage.get()), 0, sizeof(detail::link_cell));
  return storage;
}

TEST(link_cell, a_claim_makes_a_free_cell_and_matches_or_refuses_later_ones) {
  auto cell = free_cell();
  EXPECT_TRUE(detail::link_cell_claim(*cell, "pcie0", rate, burst));
  EXPECT_TRUE(detail::link_cell_claim(*cell, "pcie0", rate, burst));   // a second process
  EXPECT_FALSE(detail::link_cell_claim(*cell, "pcie1", rate, burst));  // another link's cell
  try {
    detail::link_cell_claim(*cell, "pcie0", rate / 2, burst);
    FAIL() << "a different rate was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("500000000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1000000000"), std::string::npos) << e.what();
  }
  EXPECT_THROW(detail::link_cell_claim(*free_cell(), "x", 0, burst), invalid_argument);
  EXPECT_THROW(detail::link_cell_claim(*free_cell(), std::string(80, 'n'), rate, burst),
               invalid_argument);
  EXPECT_THROW(detail::link_cell_claim(*free_cell(), "x", 1, std::uint64_t{1} << 62),
               invalid_argument);  // a burst of 146 years at 1 B/s
  EXPECT_THROW(detail::make_cell_link(*free_cell(), 0, nullptr), invalid_argument);
  EXPECT_THROW(detail::make_cell_link(*cell, detail::link_cell_slots, nullptr), invalid_argument);
}

TEST(link_cell, two_processes_share_one_burst_and_its_bytes_are_counted_per_slot) {
  auto cell = free_cell();
  ASSERT_TRUE(detail::link_cell_claim(*cell, "switch", rate, burst));
  auto a = link_of(*cell, 0, cell);
  auto b = link_of(*cell, 5, cell);
  shared_link::waiter wa, wb;
  // A fresh cell holds one burst: a takes half, b the other half, and then neither gets more
  // until the cell refills (the wait is at most one half's time at the rate).
  EXPECT_EQ(a->take_or_wait(burst / 2, transfer_priority::prefetch, wa), 0);
  EXPECT_EQ(b->take_or_wait(burst / 2, transfer_priority::prefetch, wb), 0);
  const std::int64_t wait = b->take_or_wait(burst / 2, transfer_priority::prefetch, wb);
  EXPECT_EQ(wait, static_cast<std::int64_t>(burst / 2));  // half a burst at a byte a ns
  now_ns += wait;
  EXPECT_EQ(b->take_or_wait(burst / 2, transfer_priority::prefetch, wb), 0);
  EXPECT_EQ(a->bytes_taken(), burst + burst / 2);  // one cell: both see every byte
  EXPECT_EQ(detail::link_cell_taken_by(*cell, 0), burst / 2);
  EXPECT_EQ(detail::link_cell_taken_by(*cell, 5), burst);
  EXPECT_THROW(a->take_or_wait(2 * burst, transfer_priority::fault, wa), invalid_argument);
}

TEST(link_cell, a_fault_waiting_in_one_process_holds_back_a_prefetch_in_another) {
  auto cell = free_cell();
  ASSERT_TRUE(detail::link_cell_claim(*cell, "switch", rate, burst));
  auto a = link_of(*cell, 1, cell);
  auto b = link_of(*cell, 2, cell);
  shared_link::waiter fault_waiter, prefetch_waiter;
  ASSERT_EQ(a->take_or_wait(burst, transfer_priority::prefetch, prefetch_waiter), 0);
  // Process 1's fault now waits for the cell to refill, and counts as waiting there.
  EXPECT_GT(a->take_or_wait(burst, transfer_priority::fault, fault_waiter), 0);
  EXPECT_EQ(b->waiting(transfer_priority::fault), 1u);
  // Process 2's prefetch of one byte would fit soon, but a fault waits: it is told to wait.
  EXPECT_GT(b->take_or_wait(1, transfer_priority::prefetch, prefetch_waiter), 0);
  // Process 1 died: whoever reclaims its slot clears its counts, and nothing waits on it.
  detail::link_cell_forget_slot(*cell, 1);
  EXPECT_EQ(b->waiting(transfer_priority::fault), 0u);
  b->withdraw(prefetch_waiter);
  EXPECT_EQ(b->waiting(transfer_priority::prefetch), 0u);
}

TEST(link_cell, a_link_under_a_cell_gives_its_tokens_back_when_the_cell_refuses) {
  auto cell = free_cell();
  ASSERT_TRUE(detail::link_cell_claim(*cell, "node", rate, burst));
  auto top = link_of(*cell, 0, cell);
  // This process's own link under the node's shared one: a chain of two.
  auto own =
      std::make_shared<shared_link>("gpu0", rate, burst, &token_bucket::steady_clock_ns, top);
  shared_link::waiter w, other;
  ASSERT_EQ(top->take_or_wait(burst, transfer_priority::prefetch, other), 0);  // drain the cell
  EXPECT_GT(own->take_or_wait(burst / 4, transfer_priority::prefetch, w), 0);
  EXPECT_EQ(own->bytes_taken(), 0u);  // refused above: nothing taken below either
  EXPECT_EQ(top->waiting(transfer_priority::prefetch), 1u);
  own->withdraw(w);
  EXPECT_EQ(top->waiting(transfer_priority::prefetch), 0u);
}

TEST(link_cell, a_dead_process_s_waiting_fault_stops_holding_others_back) {
  auto cell = free_cell();
  ASSERT_TRUE(detail::link_cell_claim(*cell, "switch", rate, burst));
  auto dead = link_of(*cell, 3, cell);
  auto alive = link_of(*cell, 4, cell);
  shared_link::waiter fault_waiter, prefetch_waiter;
  ASSERT_EQ(alive->take_or_wait(burst, transfer_priority::prefetch, prefetch_waiter), 0);
  EXPECT_GT(dead->take_or_wait(burst, transfer_priority::fault, fault_waiter), 0);
  // Slot 3's process is killed here: its fault stays counted and nobody reclaims its slot.
  now_ns += static_cast<std::int64_t>(burst);  // the cell is full again
  EXPECT_GT(alive->take_or_wait(1, transfer_priority::prefetch, prefetch_waiter), 0);
  // Four burst times and a second without a word from slot 3: its count is a dead one's.
  now_ns += 4 * static_cast<std::int64_t>(burst) + 1'000'000'001;
  EXPECT_EQ(alive->take_or_wait(1, transfer_priority::prefetch, prefetch_waiter), 0);
  EXPECT_EQ(alive->waiting(transfer_priority::fault), 1u);  // counted until the slot is reclaimed
  detail::link_cell_forget_slot(*cell, 3);
  dead->withdraw(fault_waiter);  // a count already cleared does not wrap below zero
  EXPECT_EQ(alive->waiting(transfer_priority::fault), 0u);
}

TEST(link_cell, tokens_another_process_took_between_the_look_and_the_take_are_given_back) {
  auto cell = free_cell();
  ASSERT_TRUE(detail::link_cell_claim(*cell, "node", rate, burst));
  auto top = link_of(*cell, 0, cell);
  auto own = std::make_shared<shared_link>(
      "gpu0", rate, burst, [] { return now_ns.load(); }, top);
  shared_link::waiter w, other;
  ASSERT_EQ(top->take_or_wait(burst, transfer_priority::prefetch, other), 0);  // drain the cell
  const std::int64_t t = now_ns += static_cast<std::int64_t>(burst / 4);       // a quarter refilled
  {
    // The chain looks at t (time_until, higher_waiting): a quarter is there. Its take reads the
    // clock 1 us earlier, as if another process had taken those tokens meanwhile: refused.
    std::lock_guard lock(script_mutex);
    script = {t, t, t - 1000};
  }
  EXPECT_GT(own->take_or_wait(burst / 4, transfer_priority::prefetch, w), 0);
  EXPECT_EQ(own->bytes_taken(), 0u);  // the link below gave its tokens back
  EXPECT_EQ(top->bytes_taken(), burst);
  EXPECT_EQ(own->take_or_wait(burst / 4, transfer_priority::prefetch, w), 0);  // now it goes
  EXPECT_EQ(own->bytes_taken(), burst / 4);
}

}  // namespace
}  // namespace htp::test
