// The allocations a device backend has handed out, so that every backend rejects a foreign
// pointer, a wrong size or a wrong kind the same way, and can find the allocation holding an
// address. Not thread-safe: the backend holds its own lock around every call.
#pragma once

#include <htp/device.hpp>

#include <cstddef>
#include <map>

namespace htp::detail {

class allocation_registry {
 public:
  struct entry {
    std::size_t bytes;
    memory_kind kind;
  };

  /// Records an allocation just made.
  void add(void* ptr, std::size_t bytes, memory_kind kind) {
    map_.emplace(ptr, entry{bytes, kind});
  }
  /// Checks that (kind, ptr, bytes) names a live allocation exactly, then forgets it.
  /// @throws htp::invalid_argument naming the rule broken; nothing changes then.
  void remove(memory_kind kind, void* ptr, std::size_t bytes);
  /// The allocation holding all of [ptr, ptr + bytes), or null.
  const entry* find_containing(const void* ptr, std::size_t bytes) const;
  /// Calls f(ptr, entry) for every live allocation.
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [p, e] : map_) f(p, e);
  }

 private:
  std::map<void*, entry> map_;
};

}  // namespace htp::detail
