// The queue of one priority class of the transfer engine: requests leave in order of their issue
// key, earliest first, then by arrival. Not thread-safe: the engine's lock guards it.
//
// Note [Deadline order]
// A request may say when it is needed (transfer_engine::set_need_time): a prefetch for the next
// layer is needed in a millisecond, one for a layer far ahead in a hundred. Its issue key is
//     key = min(need, submitted + max_wait)
// and one without a need time has key = submitted + max_wait. So an imminent request overtakes a
// distant one, and no request starves: a request with key K can only be overtaken by requests
// with a smaller key, and a request submitted after K has a key after K. So it waits at most for
// the requests submitted before its key, a finite set. With every key = submitted + max_wait the
// order is arrival order (first come, first served). Push, erase and re-key are O(log n); the
// front is O(1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>

namespace htp::detail {

/// A request's place in a deadline_queue: its issue key (ns, on the engine's clock), then its
/// arrival number.
struct deadline_key {
  std::int64_t key = 0;
  std::uint64_t arrival = 0;
  friend bool operator<(const deadline_key& a, const deadline_key& b) noexcept {
    return a.key != b.key ? a.key < b.key : a.arrival < b.arrival;
  }
};

/// The issue key of a request submitted at `submitted_ns`, needed at `need_ns` (`no_need` when
/// not said), that may be overtaken for at most `max_wait_ns`. Saturates instead of overflowing.
inline constexpr std::int64_t no_need = std::numeric_limits<std::int64_t>::max();
inline std::int64_t issue_key(std::int64_t submitted_ns, std::int64_t need_ns,
                              std::int64_t max_wait_ns) noexcept {
  const std::int64_t latest =
      submitted_ns > no_need - max_wait_ns ? no_need : submitted_ns + max_wait_ns;
  return need_ns < latest ? need_ns : latest;
}

/// Values of type T ordered by deadline_key. T is cheap to copy (a shared pointer, an id).
template <typename T>
class deadline_queue {
 public:
  using map_type = std::map<deadline_key, T>;
  using const_iterator = typename map_type::const_iterator;

  /// Adds `value` under `k` (a key not already present: arrivals are unique).
  void push(const deadline_key& k, T value) { items_.emplace(k, std::move(value)); }
  /// Removes the value under `k`; returns whether one was there.
  bool erase(const deadline_key& k) { return items_.erase(k) != 0; }
  /// The first value in issue order. Precondition: !empty().
  const T& front() const { return items_.begin()->second; }
  /// Removes the first value. Precondition: !empty().
  void pop() { items_.erase(items_.begin()); }
  bool empty() const noexcept { return items_.empty(); }
  std::size_t size() const noexcept { return items_.size(); }
  /// Issue order, earliest key first.
  const_iterator begin() const noexcept { return items_.begin(); }
  const_iterator end() const noexcept { return items_.end(); }
  /// Removes every value for which `f(value)` returns true.
  template <typename F>
  void erase_if(F&& f) {
    for (auto it = items_.begin(); it != items_.end();)
      it = f(it->second) ? items_.erase(it) : ++it;
  }

 private:
  map_type items_;
};

}  // namespace htp::detail
