// The compute pace: device-timed gaps between scheduled acquires (see compute_pace.hpp).
#include "pager/compute_pace.hpp"

#include <limits>

namespace htp::detail {

namespace {
constexpr std::uint64_t never_measured = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t dropped = std::numeric_limits<std::size_t>::max();  // a position: discard
}  // namespace

void compute_pace::reset(std::size_t positions) {
  gap_.assign(positions, -1);
  measured_in_.assign(positions, never_measured);
  known_sum_ = 0;
  known_ = 0;
  if (open_) {
    give_back(open_->open);
    --in_flight_;
    open_.reset();
  }
  std::lock_guard lock(mutex_);
  for (auto& c : closed_) c.first.position = dropped;  // measured against the old schedule
}

compute_pace::marks compute_pace::plan(std::size_t position, std::size_t count, std::uint64_t cycle,
                                       stream_ref s) {
  marks m;
  if (open_ && open_stream_ == s && position == open_next_) {
    try {
      measurement x = *open_;
      x.close = events_.take();
      m.close = x.close;
      m.close_id = x.id;
      std::lock_guard lock(mutex_);
      closed_.emplace_back(x, false);
    } catch (...) {  // no event: the measurement is dropped
      give_back(open_->open);
      --in_flight_;
    }
  } else if (open_) {  // not followed by its next position on its stream: no measurement
    give_back(open_->open);
    --in_flight_;
  }
  open_.reset();
  if (position >= gap_.size() || count == 0 || in_flight_ >= max_open) return m;
  const std::uint64_t last = measured_in_[position];
  if (last != never_measured && gap_[position] >= 0 && cycle < last + resample_cycles) return m;
  try {
    open_ = measurement{next_id_++, position, events_.take(), {}};
  } catch (...) {
    return m;  // no timed event to be had: this call is not measured
  }
  open_next_ = (position + count) % gap_.size();
  open_stream_ = s;
  measured_in_[position] = cycle;
  ++in_flight_;
  m.open = open_->open;
  return m;
}

void compute_pace::recorded(const marks& m, bool ok) {
  if (m.close_id == 0) return;
  std::lock_guard lock(mutex_);
  for (auto it = closed_.rbegin(); it != closed_.rend(); ++it) {
    if (it->first.id != m.close_id) continue;
    it->second = true;
    if (!ok) it->first.position = dropped;
    return;
  }
}

void compute_pace::harvest() {
  std::lock_guard lock(mutex_);
  while (!closed_.empty() && closed_.front().second) {
    const measurement x = closed_.front().first;
    std::optional<std::chrono::nanoseconds> t;
    try {
      if (x.position != dropped) {
        // The close mark follows the open one on the stream: once it completed, both have, and
        // no time means the open mark was never recorded.
        if (!dev_.query(x.close)) return;
        t = dev_.elapsed(x.open, x.close);
      }
    } catch (...) {  // a broken context: the measurement is lost, nothing else
    }
    if (t && t->count() >= 0 && x.position < gap_.size()) fold(x.position, t->count());
    give_back(x.open);
    give_back(x.close);
    --in_flight_;
    closed_.pop_front();
  }
}

void compute_pace::fold(std::size_t position, std::int64_t ns) {
  std::int64_t& g = gap_[position];
  if (g < 0) {
    g = ns;
    known_sum_ += ns;
    ++known_;
    return;
  }
  const std::int64_t old = g;
  g = old / 2 + ns / 2;
  known_sum_ += g - old;
}

std::optional<std::int64_t> compute_pace::gap_ns(std::size_t position) const {
  if (position >= gap_.size() || gap_[position] < 0) return std::nullopt;
  return gap_[position];
}

std::optional<std::int64_t> compute_pace::mean_gap_ns() const {
  if (known_ == 0) return std::nullopt;
  return known_sum_ / static_cast<std::int64_t>(known_);
}

}  // namespace htp::detail
