#include "pager/victim_index.hpp"

#include "pager/schedule.hpp"

#include <algorithm>

namespace htp::detail {

void victim_index::push(queue& q, std::uint32_t slot, std::uint64_t stamp) {
  q.q.emplace_back(slot, stamp);
  ++q.live;
}

void victim_index::leave(queue& q, bool never) {
  --q.live;
  // Stale entries are dropped at the head as they come; when they outnumber the live ones, all
  // at once (amortised O(1) per leave).
  if (q.q.size() > 2 * q.live + 64) {
    q.q.erase(
        std::remove_if(q.q.begin(), q.q.end(), [&](const auto& e) { return !valid(e, never); }),
        q.q.end());
  }
}

bool victim_key::routed() const noexcept {
  return indexed && popularity >= 0 && next_use == access_schedule::never;
}

void victim_index::update(std::uint32_t slot, const victim_key& key) {
  if (slot >= slots_.size())
    slots_.resize(std::max<std::size_t>(std::size_t{slot} + 1, slots_.size() * 2));
  per_slot& s = slots_[slot];
  const victim_key old = s.key;
  if (old == key) return;
  const bool same_group = old.indexed && key.indexed && old.group == key.group;
  const int og = static_cast<int>(old.group);
  const int g = static_cast<int>(key.group);
  // A routed member is ordered by popularity instead of in the never queue.
  const bool was_never = old.indexed && old.next_use == access_schedule::never && !old.routed();
  const bool is_never = key.indexed && key.next_use == access_schedule::never && !key.routed();
  if (old.routed()) routed_[og].erase({old.popularity, slot});
  // Leave what it is no longer in.
  if (old.indexed && !same_group) {
    s.joined = 0;
    leave(lru_[og], false);
  }
  if (was_never && (!same_group || !is_never)) {
    s.never = 0;
    leave(never_[og], true);
  }
  if (old.indexed && old.next_use != access_schedule::never && !old.routed())
    next_[og].erase({old.next_use, slot});
  s.key = key;
  if (!key.indexed) return;
  // Join what it is now in.
  if (!same_group) {
    s.joined = clock_++;
    push(lru_[g], slot, s.joined);
  }
  if (is_never && !(same_group && was_never)) {
    s.never = clock_++;
    push(never_[g], slot, s.never);
  }
  if (key.routed()) {
    routed_[g].insert({key.popularity, slot});
  } else if (!is_never) {
    next_[g].insert({key.next_use, slot});
  }
}

const victim_key& victim_index::key_of(std::uint32_t slot) const {
  static const victim_key absent{};
  return slot < slots_.size() ? slots_[slot].key : absent;
}

std::uint64_t victim_index::recency(std::uint32_t slot) const {
  return slot < slots_.size() ? slots_[slot].joined : 0;
}

}  // namespace htp::detail
