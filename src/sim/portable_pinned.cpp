#include "sim/portable_pinned.hpp"

#include <functional>
#include <map>
#include <mutex>

namespace htp::sim::portable_pinned {
namespace {

struct ranges {
  std::mutex mutex;
  std::multimap<const char*, std::size_t, std::less<>> by_start;  // start -> bytes, one per add
};

ranges& all() {
  // Never destroyed: a sim device in static storage (a benchmark's fixture, a test's) may be
  // destroyed at exit after every other static, and frees its pinned memory through here then.
  static ranges* r = new ranges;
  return *r;
}

}  // namespace

void add(const void* ptr, std::size_t bytes) {
  ranges& r = all();
  std::lock_guard lock(r.mutex);
  r.by_start.emplace(static_cast<const char*>(ptr), bytes);
}

void remove(const void* ptr, std::size_t bytes) noexcept {
  ranges& r = all();
  std::lock_guard lock(r.mutex);
  const auto [first, last] = r.by_start.equal_range(static_cast<const char*>(ptr));
  for (auto it = first; it != last; ++it) {
    if (it->second == bytes) {
      r.by_start.erase(it);
      return;
    }
  }
}

bool contains(const void* ptr, std::size_t bytes) {
  ranges& r = all();
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard lock(r.mutex);
  // Ranges may nest or repeat: any range starting at or below p that reaches p + bytes will do.
  for (auto it = r.by_start.upper_bound(p); it != r.by_start.begin();) {
    --it;
    if (p + bytes <= it->first + it->second) return true;
  }
  return false;
}

}  // namespace htp::sim::portable_pinned
