// A shared link whose budget lives in a link cell of a node's shared tier: the generic cell rate
// algorithm on one atomic word, so processes draw from it without a lock (a process that dies
// mid-take leaves the word consistent), and per-slot waiting counts that whoever reclaims a dead
// process's slot clears (link_cell_forget_slot).
#include <htp/detail/link_cell.hpp>

#include <htp/detail/check.hpp>
#include <htp/shared_link.hpp>

#include "link_budget.hpp"

#include <algorithm>
#include <cstring>

namespace htp::detail {

namespace {
__extension__ typedef unsigned __int128 u128;  // NOLINT: GCC and Clang both have it
constexpr std::uint64_t ns_per_s = 1'000'000'000;
constexpr std::uint32_t cell_free = 0, cell_making = 1, cell_ready = 2;
/// The longest burst a cell takes, in time: 10^9 s keeps every sum of times in 64 bits.
constexpr std::uint64_t max_burst_ns = 1'000'000'000ULL * ns_per_s;

static_assert(std::atomic<std::int64_t>::is_always_lock_free &&
                  std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "a link cell's atomics must be lock-free to work across processes");

/// Nanoseconds `bytes` occupy the link at `rate`, rounded up (so the cap is never exceeded).
std::int64_t ns_of(std::uint64_t bytes, std::uint64_t rate) noexcept {
  const u128 scaled = static_cast<u128>(bytes) * ns_per_s;
  return static_cast<std::int64_t>((scaled + rate - 1) / rate);
}

void check_rate(const char* name, std::uint64_t bytes_per_second, std::uint64_t burst_bytes) {
  HTP_EXPECTS(bytes_per_second > 0 && burst_bytes > 0, invalid_argument, "shared link '", name,
              "': rate (", bytes_per_second, " B/s) and burst (", burst_bytes,
              " B) must both be above 0");
  HTP_EXPECTS(static_cast<u128>(burst_bytes) * ns_per_s / bytes_per_second <= max_burst_ns,
              invalid_argument, "shared link '", name, "': a burst of ", burst_bytes, " B at ",
              bytes_per_second, " B/s lasts over 10^9 s; raise the rate");
}

std::int64_t steady_ns() noexcept { return token_bucket::steady_clock_ns(); }

/// The budget of one cell, as this process's `slot` sees it.
class cell_budget final : public link_budget {
 public:
  cell_budget(link_cell& cell, std::size_t slot, link_cell_clock clock)
      : cell_(cell), slot_(slot), clock_(clock != nullptr ? clock : &steady_ns) {}

  std::int64_t time_until(std::uint64_t bytes) override {
    check_burst(bytes);
    const std::uint64_t rate = cell_.rate.load(std::memory_order_relaxed);
    const std::int64_t now = clock_();
    cell_.asked_ns[slot_].store(now, std::memory_order_relaxed);
    const std::int64_t base = std::max(cell_.tat_ns.load(std::memory_order_acquire), now);
    const std::int64_t over = base + ns_of(bytes, rate) - now - ns_of(cell_.burst, rate);
    return std::max<std::int64_t>(0, over);
  }
  bool take(std::uint64_t bytes) override {
    check_burst(bytes);
    const std::uint64_t rate = cell_.rate.load(std::memory_order_relaxed);
    const std::int64_t tau = ns_of(cell_.burst, rate), cost = ns_of(bytes, rate);
    std::int64_t tat = cell_.tat_ns.load(std::memory_order_acquire);
    for (;;) {
      const std::int64_t now = clock_();
      const std::int64_t next = std::max(tat, now) + cost;
      if (next - now > tau) return false;
      if (cell_.tat_ns.compare_exchange_weak(tat, next, std::memory_order_acq_rel)) break;
    }
    cell_.taken.fetch_add(bytes, std::memory_order_relaxed);
    cell_.taken_by[slot_].fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }
  void give_back(std::uint64_t bytes) noexcept override {
    cell_.tat_ns.fetch_sub(ns_of(bytes, cell_.rate.load(std::memory_order_relaxed)),
                           std::memory_order_acq_rel);
    cell_.taken.fetch_sub(bytes, std::memory_order_relaxed);
    cell_.taken_by[slot_].fetch_sub(bytes, std::memory_order_relaxed);
  }
  bool higher_waiting(int p) const noexcept override {
    // A slot that has not asked for tokens in four burst times and a second holds no live waiter:
    // its process died, and its counts stay until its tier slot is reclaimed.
    const std::int64_t now = clock_();
    const std::int64_t stale = 4 * ns_of(cell_.burst, rate()) + 1'000'000'000;
    for (std::size_t s = 0; s < link_cell_slots; ++s) {
      for (int q = 0; q < p; ++q) {
        if (cell_.waiting[s][static_cast<std::size_t>(q)].load(std::memory_order_relaxed) != 0 &&
            now - cell_.asked_ns[s].load(std::memory_order_relaxed) <= stale)
          return true;
      }
    }
    return false;
  }
  void add_waiting(int p, int delta) noexcept override {
    // Saturating: a count cleared by link_cell_forget_slot never wraps below zero.
    std::atomic<std::uint32_t>& w = cell_.waiting[slot_][static_cast<std::size_t>(p)];
    std::uint32_t v = w.load(std::memory_order_relaxed);
    while (!w.compare_exchange_weak(v, delta < 0 ? (v == 0 ? 0 : v - 1) : v + 1,
                                    std::memory_order_relaxed)) {
    }
  }
  std::uint64_t waiting(int p) const noexcept override {
    std::uint64_t n = 0;
    for (std::size_t s = 0; s < link_cell_slots; ++s)
      n += cell_.waiting[s][static_cast<std::size_t>(p)].load(std::memory_order_relaxed);
    return n;
  }
  void set_rate(std::uint64_t bytes_per_second) override {
    check_rate(cell_.name, bytes_per_second, cell_.burst);
    cell_.rate.store(bytes_per_second, std::memory_order_relaxed);
  }
  std::uint64_t rate() const noexcept override {
    return cell_.rate.load(std::memory_order_relaxed);
  }
  std::uint64_t burst() const noexcept override { return cell_.burst; }
  std::uint64_t taken() const noexcept override {
    return cell_.taken.load(std::memory_order_relaxed);
  }

 private:
  void check_burst(std::uint64_t bytes) const {
    HTP_EXPECTS(bytes <= cell_.burst, invalid_argument, "shared link '", cell_.name, "': ", bytes,
                " bytes at once are more than its burst of ", cell_.burst,
                " bytes and could never cross");
  }
  link_cell& cell_;
  std::size_t slot_;
  link_cell_clock clock_;
};
}  // namespace

bool link_cell_claim(link_cell& cell, const std::string& name, std::uint64_t bytes_per_second,
                     std::uint64_t burst_bytes) {
  check_rate(name.c_str(), bytes_per_second, burst_bytes);
  HTP_EXPECTS(!name.empty() && name.size() < sizeof(cell.name), invalid_argument,
              "shared link name '", name, "' must have 1 to ", sizeof(cell.name) - 1, " bytes");
  // Callers claim under the tier's lock, so a cell being made is one whose maker died: made anew.
  std::uint32_t state = cell.state.load(std::memory_order_acquire);
  if (state == cell_free || state == cell_making) {
    cell.state.store(cell_making, std::memory_order_relaxed);
    std::memset(cell.name, 0, sizeof(cell.name));
    std::memcpy(cell.name, name.data(), name.size());
    cell.made_rate = bytes_per_second;
    cell.burst = burst_bytes;
    cell.rate.store(bytes_per_second, std::memory_order_relaxed);
    cell.tat_ns.store(0, std::memory_order_relaxed);
    cell.state.store(cell_ready, std::memory_order_release);
    return true;
  }
  if (std::strncmp(cell.name, name.c_str(), sizeof(cell.name)) != 0) return false;
  HTP_EXPECTS(cell.made_rate == bytes_per_second && cell.burst == burst_bytes, invalid_argument,
              "shared link '", name, "' exists in this tier with ", cell.made_rate, " B/s and a ",
              cell.burst, " B burst; this process asked for ", bytes_per_second, " B/s and ",
              burst_bytes, " B: every process must pass the same");
  return true;
}

void link_cell_forget_slot(link_cell& cell, std::size_t slot) noexcept {
  if (slot >= link_cell_slots) return;
  for (auto& w : cell.waiting[slot]) w.store(0, std::memory_order_relaxed);
}

std::uint64_t link_cell_taken_by(const link_cell& cell, std::size_t slot) noexcept {
  return slot < link_cell_slots ? cell.taken_by[slot].load(std::memory_order_relaxed) : 0;
}

std::shared_ptr<shared_link> make_cell_link(link_cell& cell, std::size_t slot,
                                            std::shared_ptr<const void> owner,
                                            link_cell_clock clock) {
  HTP_EXPECTS(cell.state.load(std::memory_order_acquire) == cell_ready, invalid_argument,
              "make_cell_link: the link cell is not ready (claim it first)");
  HTP_EXPECTS(slot < link_cell_slots, invalid_argument, "make_cell_link: slot ", slot,
              " is past the ", link_cell_slots, " a cell counts");
  return std::shared_ptr<shared_link>(new shared_link(
      cell.name, std::make_unique<cell_budget>(cell, slot, clock), std::move(owner)));
}

}  // namespace htp::detail
