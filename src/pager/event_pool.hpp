// Device events for release points, shared and recycled. A release of a block table records one
// event that every tensor of the block holds, so events are reference-counted: an event returns to
// the idle list (and may be recorded again) only when its last holder lets go. Not thread-safe: the
// pager guards it.
#pragma once

#include <htp/device.hpp>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace htp::detail {

class event_pool {
 public:
  /// `timed`: the events are made by device::create_timed_event (for device::elapsed).
  explicit event_pool(device& dev, bool timed = false) : dev_(dev), timed_(timed) {}
  /// Destroys every event it created. The caller has synchronised them.
  ~event_pool();
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;

  /// An idle event (created if none is idle), held once by the caller.
  event_ref take();
  /// One more holder of `e`.
  void retain(event_ref e);
  /// One holder fewer; the event becomes idle with the last.
  void release(event_ref e);
  /// Events created so far (idle or held): bounded when releases are recycled.
  std::size_t created() const noexcept { return all_.size(); }
  /// Every event created, for teardown.
  const std::vector<event_ref>& all() const noexcept { return all_; }

 private:
  device& dev_;
  bool timed_ = false;
  std::vector<event_ref> idle_;
  std::vector<event_ref> all_;
  std::unordered_map<void*, std::uint32_t> holders_;
};

}  // namespace htp::detail
