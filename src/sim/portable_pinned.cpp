#include "sim/portable_pinned.hpp"

#include <functional>
#include <iterator>
#include <map>
#include <mutex>

namespace htp::sim::portable_pinned {
namespace {

struct ranges {
  std::mutex mutex;
  std::map<const char*, std::size_t, std::less<>> by_start;  // start -> bytes
};

ranges& all() {
  static ranges r;  // outlives every sim device (constructed on first use)
  return r;
}

}  // namespace

void add(const void* ptr, std::size_t bytes) {
  ranges& r = all();
  std::lock_guard lock(r.mutex);
  r.by_start[static_cast<const char*>(ptr)] = bytes;
}

void remove(const void* ptr) noexcept {
  ranges& r = all();
  std::lock_guard lock(r.mutex);
  r.by_start.erase(static_cast<const char*>(ptr));
}

bool contains(const void* ptr, std::size_t bytes) {
  ranges& r = all();
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard lock(r.mutex);
  auto it = r.by_start.upper_bound(p);
  if (it == r.by_start.begin()) return false;
  --it;
  return p + bytes <= it->first + it->second;
}

}  // namespace htp::sim::portable_pinned
