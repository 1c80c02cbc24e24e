// Fences: HBM freed while kernels may still read it. Whoever is handed memory overlapping a fence's
// range next must order its copy after the fence's events on the device, and the events may not
// be recorded again until every request told to wait on them has finished. Kept ordered by
// address, so finding the fences over an extent is O(log n + k), and dropped oldest first, so a
// reap costs O(1) amortised whatever the number of tensors. Not thread-safe: the pager guards it.
#pragma once

#include <htp/device.hpp>
#include <htp/transfer_engine.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace htp::detail {

struct fence {
  const char* begin = nullptr;
  const char* end = nullptr;
  std::vector<event_ref> events;       // held: released when the fence is dropped
  std::vector<transfer_ticket> users;  // requests that were told to wait on `events`
};

class fence_set {
 public:
  /// Adds a fence over [begin, end).
  void add(const char* begin, const char* end, std::vector<event_ref> events,
           std::vector<transfer_ticket> users = {});
  /// Appends the events of every fence overlapping [begin, end) to `out`.
  void events_over(const char* begin, const char* end, std::vector<event_ref>& out) const;
  /// Registers `user` as waiting on every fence overlapping [begin, end).
  void add_user(const char* begin, const char* end, transfer_ticket user);
  /// Drops fences, oldest first, while `done(fence)` holds; `drop(event)` releases each event of a
  /// dropped fence. Stops at the first fence still in use (a younger finished one waits its turn:
  /// it only keeps a few events alive a little longer).
  void drop_finished(const std::function<bool(const fence&)>& done,
                     const std::function<void(event_ref)>& drop);
  /// Every fence, for teardown.
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [k, v] : by_address_) f(v);
  }
  std::size_t size() const noexcept { return by_address_.size(); }

 private:
  using key = std::pair<const char*, std::uint64_t>;  // (begin, id)
  template <typename F>
  void visit(const char* begin, const char* end, F&& f);

  std::map<key, fence> by_address_;
  std::deque<key> by_age_;
  std::uint64_t next_id_ = 0;
  // Lengths of the live fences: the longest bounds the search to the left of `begin`, and shrinks
  // again when a long fence is dropped (one fence over a GB tensor must not slow every later
  // lookup).
  std::multiset<std::size_t> lengths_;
};

}  // namespace htp::detail
