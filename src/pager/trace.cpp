#include "pager/trace.hpp"

#include <nlohmann/json.hpp>

namespace htp::detail {

void trace_log::add(trace_track track, std::string name, std::string category,
                    clock::time_point begin, clock::time_point end) {
  const auto us = [&](clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  span s{track, std::move(name), std::move(category), us(begin),
         std::max(0.0, us(end) - us(begin))};
  std::lock_guard lock(mutex_);
  if (spans_.size() < capacity_) {
    spans_.push_back(std::move(s));
    return;
  }
  spans_[next_] = std::move(s);
  next_ = (next_ + 1) % capacity_;
  ++dropped_;
}

std::size_t trace_log::size() const {
  std::lock_guard lock(mutex_);
  return spans_.size();
}

std::string trace_log::to_json() const {
  nlohmann::json events = nlohmann::json::array();
  const char* names[] = {"", "compute stream (device)", "prefetch stream (H2D)",
                         "reduction stream (D2H)", "acquired (host: acquire..release)"};
  for (int tid = 1; tid <= 4; ++tid) {
    events.push_back({{"ph", "M"},
                      {"pid", 1},
                      {"tid", tid},
                      {"name", "thread_name"},
                      {"args", {{"name", names[tid]}}}});
  }
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    const span& s = spans_[(next_ + i) % spans_.size()];  // oldest first
    events.push_back({{"ph", "X"},
                      {"pid", 1},
                      {"tid", static_cast<int>(s.track)},
                      {"name", s.name},
                      {"cat", s.category},
                      {"ts", s.begin_us},
                      {"dur", s.dur_us}});
  }
  return nlohmann::json{{"traceEvents", events},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{"dropped_spans", dropped_}, {"capacity", capacity_}}}}
      .dump();
}

}  // namespace htp::detail
