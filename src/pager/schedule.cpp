#include "pager/schedule.hpp"

#include <algorithm>

namespace htp::detail {

void access_schedule::set(std::vector<std::uint32_t> sequence, bool cyclic) {
  sequence_ = std::move(sequence);
  cyclic_ = cyclic;
  cursor_ = 0;
  positions_.clear();
  for (std::size_t i = 0; i < sequence_.size(); ++i) positions_[sequence_[i]].push_back(i);
}

namespace {
/// The first position >= from in `pos` (sorted), or pos.end().
std::vector<std::size_t>::const_iterator first_at_or_after(const std::vector<std::size_t>& pos,
                                                           std::size_t from) {
  return std::lower_bound(pos.begin(), pos.end(), from);
}
}  // namespace

void access_schedule::on_access(std::uint32_t slot) {
  auto it = positions_.find(slot);
  if (it == positions_.end() || sequence_.empty()) return;
  const auto& pos = it->second;
  auto p = first_at_or_after(pos, cursor_);
  if (p == pos.end()) {
    if (!cyclic_) return;  // past its last use: an unexpected access
    p = pos.begin();
  }
  cursor_ = *p + 1;
  if (cyclic_ && cursor_ == sequence_.size()) cursor_ = 0;
}

std::uint64_t access_schedule::distance(std::uint32_t slot) const {
  return distance_from(slot, cursor_);
}

std::uint64_t access_schedule::distance_from(std::uint32_t slot, std::size_t from) const {
  auto it = positions_.find(slot);
  if (it == positions_.end()) return never;
  const auto& pos = it->second;
  auto p = first_at_or_after(pos, from);
  if (p != pos.end()) return *p - from;
  if (!cyclic_) return never;
  return sequence_.size() - from + pos.front();
}

std::uint64_t access_schedule::distance_after(std::uint32_t slot, std::uint32_t after_slot) const {
  const std::uint64_t d = distance(after_slot);
  if (d == never) return never;
  std::size_t from = cursor_ + static_cast<std::size_t>(d) + 1;
  if (from >= sequence_.size()) {
    if (!cyclic_) return never;
    from %= sequence_.size();
  }
  return distance_from(slot, from);
}

std::vector<std::uint32_t> access_schedule::upcoming(std::size_t k) const {
  std::vector<std::uint32_t> out;
  const std::size_t n = sequence_.size();
  for (std::size_t i = 0; i < k && i < n; ++i) {
    std::size_t p = cursor_ + i;
    if (p >= n) {
      if (!cyclic_) break;
      p -= n;
    }
    out.push_back(sequence_[p]);
  }
  return out;
}

void access_schedule::forget(std::uint32_t slot) {
  if (positions_.erase(slot) == 0) return;
  std::vector<std::uint32_t> kept;
  kept.reserve(sequence_.size());
  std::size_t removed_before_cursor = 0;
  for (std::size_t i = 0; i < sequence_.size(); ++i) {
    if (sequence_[i] == slot) {
      if (i < cursor_) ++removed_before_cursor;
      continue;
    }
    kept.push_back(sequence_[i]);
  }
  const std::size_t cursor = cursor_ - removed_before_cursor;
  set(std::move(kept), cyclic_);
  cursor_ = sequence_.empty() ? 0 : cursor % sequence_.size();
}

}  // namespace htp::detail
