// A link whose budget lives in a link cell (the form a node's shared tier keeps it in, so that
// several processes draw from one budget). Two links over one cell with different slots stand for
// two processes: the cell's word and counts are all they share, exactly as across processes.
#include <htp/detail/link_cell.hpp>
#include <htp/error.hpp>
#include <htp/shared_link.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace htp::test {
namespace {

constexpr std::uint64_t rate = 1'000'000'000;  // 1 GB/s
constexpr std::uint64_t burst = 1 << 20;

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
  EXPECT_THROW(detail::make_cell_link(*free_cell(), 0, nullptr), invalid_argument);
  EXPECT_THROW(detail::make_cell_link(*cell, detail::link_cell_slots, nullptr), invalid_argument);
}

TEST(link_cell, two_processes_share_one_burst_and_its_bytes_are_counted_per_slot) {
  auto cell = free_cell();
  ASSERT_TRUE(detail::link_cell_claim(*cell, "switch", rate, burst));
  auto a = detail::make_cell_link(*cell, 0, cell);
  auto b = detail::make_cell_link(*cell, 5, cell);
  shared_link::waiter wa, wb;
  // A fresh cell holds one burst: a takes half, b the other half, and then neither gets more
  // until the cell refills (the wait is at most one half's time at the rate).
  EXPECT_EQ(a->take_or_wait(burst / 2, transfer_priority::prefetch, wa), 0);
  EXPECT_EQ(b->take_or_wait(burst / 2, transfer_priority::prefetch, wb), 0);
  const std::int64_t wait = b->take_or_wait(burst / 2, transfer_priority::prefetch, wb);
  EXPECT_GT(wait, 0);
  EXPECT_LE(wait, static_cast<std::int64_t>(burst / 2 * 1'000'000'000ULL / rate) + 1);
  EXPECT_EQ(a->bytes_taken(), burst);  // one cell: both see every byte
  EXPECT_EQ(detail::link_cell_taken_by(*cell, 0), burst / 2);
  EXPECT_EQ(detail::link_cell_taken_by(*cell, 5), burst / 2);
  EXPECT_THROW(a->take_or_wait(2 * burst, transfer_priority::fault, wa), invalid_argument);
}

TEST(link_cell, a_fault_waiting_in_one_process_holds_back_a_prefetch_in_another) {
  auto cell = free_cell();
  ASSERT_TRUE(detail::link_cell_claim(*cell, "switch", rate, burst));
  auto a = detail::make_cell_link(*cell, 1, cell);
  auto b = detail::make_cell_link(*cell, 2, cell);
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
  auto top = detail::make_cell_link(*cell, 0, cell);
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

}  // namespace
}  // namespace htp::test
