// Device-timed stalls of acquires that wait for prefetches (see wait_probes.hpp).
#include "pager/wait_probes.hpp"

#include <optional>

namespace htp::detail {

wait_probes::probe wait_probes::take(std::uint32_t prefetches) {
  probe p;
  {
    std::lock_guard lock(mutex_);
    if (prefetches == 0 || queue_.size() >= max_in_flight) return p;
  }
  try {
    p.reach = events_.take();
    p.met = events_.take();
  } catch (...) {  // no timed event to be had: this call is not probed
    if (p.reach) events_.release(p.reach);
    return {};
  }
  p.id = next_id_++;
  p.prefetches = prefetches;
  std::lock_guard lock(mutex_);
  queue_.emplace_back(p, 0);
  return p;
}

void wait_probes::recorded(const probe& p, bool ok) {
  if (p.id == 0) return;
  std::lock_guard lock(mutex_);
  for (auto it = queue_.rbegin(); it != queue_.rend(); ++it) {
    if (it->first.id != p.id) continue;
    if (it->second == 0) it->second = ok ? 1 : -1;
    return;
  }
}

void wait_probes::harvest(
    const std::function<void(std::uint32_t)>& on_time,
    const std::function<void(std::uint32_t, std::chrono::nanoseconds)>& late) {
  std::lock_guard lock(mutex_);
  while (!queue_.empty() && queue_.front().second != 0) {
    const auto [p, state] = queue_.front();
    if (state == 1) {
      std::optional<std::chrono::nanoseconds> t;
      try {
        if (!dev_.query(p.met)) return;  // `met` follows `reach` on the stream
        t = dev_.elapsed(p.reach, p.met);
      } catch (...) {  // a broken context: the probe is lost
      }
      if (t && t->count() <= on_time_ns) {
        on_time(p.prefetches);
      } else if (t) {
        late(p.prefetches, *t);
      }
    }
    events_.release(p.reach);
    events_.release(p.met);
    queue_.pop_front();
  }
}

}  // namespace htp::detail
