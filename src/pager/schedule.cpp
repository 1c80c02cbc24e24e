#include "pager/schedule.hpp"

#include <algorithm>

namespace htp::detail {

void access_schedule::set(std::vector<std::uint32_t> sequence, bool cyclic) {
  sequence_ = std::move(sequence);
  cyclic_ = cyclic;
  cursor_ = 0;
  cycle_ = 0;
  offsets_.clear();
  positions_.clear();
  if (sequence_.empty()) return;
  const std::uint32_t max_slot = *std::max_element(sequence_.begin(), sequence_.end());
  offsets_.assign(std::size_t{max_slot} + 2, 0);
  for (std::uint32_t s : sequence_) ++offsets_[std::size_t{s} + 1];
  for (std::size_t i = 1; i < offsets_.size(); ++i) offsets_[i] += offsets_[i - 1];
  positions_.resize(sequence_.size());
  std::vector<std::size_t> fill(offsets_.begin(), offsets_.end() - 1);
  for (std::size_t i = 0; i < sequence_.size(); ++i) positions_[fill[sequence_[i]]++] = i;
}

bool access_schedule::contains(std::uint32_t slot) const noexcept {
  return std::size_t{slot} + 1 < offsets_.size() &&
         offsets_[slot] != offsets_[std::size_t{slot} + 1];
}

std::uint64_t access_schedule::first_use_from(std::uint32_t slot, std::uint64_t t) const {
  if (!contains(slot)) return never;
  const std::size_t n = sequence_.size();
  const std::uint64_t cycle = t / n;
  const std::size_t from = static_cast<std::size_t>(t % n);
  if (!cyclic_ && cycle > 0) return never;
  const auto b = positions_.begin() + static_cast<std::ptrdiff_t>(offsets_[slot]);
  const auto e = positions_.begin() + static_cast<std::ptrdiff_t>(offsets_[std::size_t{slot} + 1]);
  const auto p = std::lower_bound(b, e, from);
  if (p != e) return cycle * n + *p;
  if (!cyclic_) return never;
  return (cycle + 1) * n + *b;
}

void access_schedule::on_access(std::uint32_t slot, std::vector<std::uint32_t>* skipped) {
  if (sequence_.empty() || !contains(slot)) return;
  const std::uint64_t at = first_use_from(slot, now());
  if (at == never) return;  // past its last use: an unexpected access
  const std::size_t n = sequence_.size();
  if (skipped != nullptr) {
    for (std::uint64_t t = now(); t < at; ++t) skipped->push_back(sequence_[t % n]);
  }
  const std::uint64_t next = at + 1;
  if (cyclic_) {
    cycle_ = next / n;
    cursor_ = static_cast<std::size_t>(next % n);
  } else {
    cursor_ = static_cast<std::size_t>(next);  // may equal n: the schedule is over
  }
}

std::uint64_t access_schedule::next_use(std::uint32_t slot) const {
  if (!cyclic_ && cursor_ >= sequence_.size()) return never;
  return first_use_from(slot, now());
}

std::uint64_t access_schedule::next_use_after(std::uint32_t slot, std::uint64_t t) const {
  if (t == never) return never;
  return first_use_from(slot, t + 1);
}

std::uint64_t access_schedule::distance(std::uint32_t slot) const {
  const std::uint64_t u = next_use(slot);
  return u == never ? never : u - now();
}

std::uint64_t access_schedule::distance_after(std::uint32_t slot, std::uint32_t after_slot) const {
  const std::uint64_t t = next_use(after_slot);
  if (t == never) return never;
  const std::uint64_t u = next_use_after(slot, t);
  return u == never ? never : u - (t + 1);
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
  if (!contains(slot)) return;
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
  const std::uint64_t cycle = cycle_;
  set(std::move(kept), cyclic_);
  if (sequence_.empty()) return;
  if (cyclic_) {
    cycle_ = cycle + cursor / sequence_.size();
    cursor_ = cursor % sequence_.size();
  } else {
    cursor_ = std::min(cursor, sequence_.size());
  }
}

}  // namespace htp::detail
