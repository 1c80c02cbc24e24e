#include "pager/event_pool.hpp"

namespace htp::detail {

event_pool::~event_pool() {
  for (event_ref e : all_) dev_.destroy_event(e);
}

event_ref event_pool::take() {
  event_ref e;
  if (!idle_.empty()) {
    e = idle_.back();
    idle_.pop_back();
  } else {
    // Room first, so that push_back cannot throw after the event exists (it would leak); grown
    // geometrically (reserve(size + 1) copied every event on each creation: quadratic).
    if (all_.size() == all_.capacity()) all_.reserve(2 * all_.size() + 16);
    e = timed_ ? dev_.create_timed_event() : dev_.create_event();
    all_.push_back(e);
  }
  holders_[e.native] = 1;
  return e;
}

void event_pool::retain(event_ref e) { ++holders_[e.native]; }

void event_pool::release(event_ref e) {
  auto it = holders_.find(e.native);
  if (it == holders_.end()) return;
  if (--it->second == 0) {
    holders_.erase(it);
    idle_.push_back(e);
  }
}

}  // namespace htp::detail
