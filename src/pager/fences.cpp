#include "pager/fences.hpp"

namespace htp::detail {

void fence_set::add(const char* begin, const char* end, std::vector<event_ref> events,
                    std::vector<transfer_ticket> users) {
  const key k{begin, next_id_++};
  lengths_.insert(static_cast<std::size_t>(end - begin));
  by_address_.emplace(k, fence{begin, end, std::move(events), std::move(users)});
  by_age_.push_back(k);
}

template <typename F>
void fence_set::visit(const char* begin, const char* end, F&& f) {
  if (by_address_.empty()) return;
  const auto lo = reinterpret_cast<std::uintptr_t>(begin);
  const std::size_t longest = *lengths_.rbegin();
  const char* from = lo > longest ? begin - longest : nullptr;
  for (auto it = by_address_.lower_bound({from, 0});
       it != by_address_.end() && it->first.first < end; ++it) {
    if (begin < it->second.end) f(it->second);
  }
}

void fence_set::events_over(const char* begin, const char* end, std::vector<event_ref>& out) const {
  const_cast<fence_set*>(this)->visit(
      begin, end, [&](const fence& f) { out.insert(out.end(), f.events.begin(), f.events.end()); });
}

void fence_set::add_user(const char* begin, const char* end, transfer_ticket user) {
  visit(begin, end, [&](fence& f) { f.users.push_back(user); });
}

void fence_set::drop_finished(const std::function<bool(const fence&)>& done,
                              const std::function<void(event_ref)>& drop) {
  while (!by_age_.empty()) {
    auto it = by_address_.find(by_age_.front());
    if (!done(it->second)) return;
    for (event_ref e : it->second.events) drop(e);
    lengths_.erase(lengths_.find(static_cast<std::size_t>(it->second.end - it->second.begin)));
    by_address_.erase(it);
    by_age_.pop_front();
  }
}

}  // namespace htp::detail
