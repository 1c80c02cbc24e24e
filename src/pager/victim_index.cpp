#include "pager/victim_index.hpp"

#include "pager/schedule.hpp"

namespace htp::detail {

void victim_index::erase(std::uint32_t slot, const victim_key& k) {
  if (!k.indexed) return;
  const int g = static_cast<int>(k.group);
  lru_[g].erase({k.last_access, slot});
  if (k.next_use == access_schedule::never) {
    never_[g].erase({k.last_access, slot});
  } else {
    next_[g].erase({k.next_use, slot});
  }
}

void victim_index::insert(std::uint32_t slot, const victim_key& k) {
  if (!k.indexed) return;
  const int g = static_cast<int>(k.group);
  lru_[g].insert({k.last_access, slot});
  if (k.next_use == access_schedule::never) {
    never_[g].insert({k.last_access, slot});
  } else {
    next_[g].insert({k.next_use, slot});
  }
}

void victim_index::update(std::uint32_t slot, const victim_key& key) {
  if (slot >= keys_.size()) keys_.resize(std::size_t{slot} + 1);
  victim_key& old = keys_[slot];
  if (old == key) return;
  erase(slot, old);
  insert(slot, key);
  old = key;
}

const victim_key& victim_index::key_of(std::uint32_t slot) const {
  static const victim_key absent{};
  return slot < keys_.size() ? keys_[slot] : absent;
}

void victim_index::clear() {
  keys_.clear();
  for (int g = 0; g < victim_group_count; ++g) {
    lru_[g].clear();
    never_[g].clear();
    next_[g].clear();
  }
}

}  // namespace htp::detail
