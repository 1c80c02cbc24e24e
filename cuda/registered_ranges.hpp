// Host ranges registered with the cuda backend (cudaHostRegister): which exist, whether they
// overlap, and the device address of an address inside one. Not thread-safe: the backend holds its
// memory lock around every call. Plain C++; included only by cuda_device.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

namespace htp::cuda {

class registered_ranges {
 public:
  /// One registered range, keyed by its first byte.
  struct range {
    std::size_t bytes = 0;
    bool read_only = false;
    /// cudaHostGetDevicePointer of the first byte; null while pending.
    void* device_base = nullptr;
    /// Driver registrations it was made of (detail::for_each_registration_piece).
    std::size_t pieces = 1;
  };

  /// True when [ptr, ptr + bytes) shares a byte with a registered range.
  bool overlaps(const void* ptr, std::size_t bytes) const {
    const auto p = address(ptr);
    auto it = map_.upper_bound(ptr);  // first range starting after ptr
    if (it != map_.end() && address(it->first) < p + bytes) return true;
    if (it == map_.begin()) return false;
    --it;  // the last range starting at or before ptr
    return address(it->first) + it->second.bytes > p;
  }

  /// Records a range (the caller checked overlaps() first); pending when r.device_base is null.
  void add(const void* ptr, const range& r) { map_.emplace(ptr, r); }

  /// Completes the pending range starting at `ptr` with its device address.
  void set_device_base(const void* ptr, void* device_base) {
    if (auto it = map_.find(ptr); it != map_.end()) it->second.device_base = device_base;
  }

  /// The range starting exactly at `ptr`, or null.
  const range* find_start(const void* ptr) const {
    const auto it = map_.find(ptr);
    return it == map_.end() ? nullptr : &it->second;
  }

  /// Forgets the range starting at `ptr`; false if there is none.
  bool remove(const void* ptr) { return map_.erase(ptr) == 1; }

  /// Device address of `ptr` when it lies inside a registered range (not a pending one), else null.
  void* device_address(const void* ptr) const {
    auto it = map_.upper_bound(ptr);
    if (it == map_.begin()) return nullptr;
    --it;
    const auto offset = address(ptr) - address(it->first);
    if (offset >= it->second.bytes || it->second.device_base == nullptr) return nullptr;
    return static_cast<char*>(it->second.device_base) + offset;
  }

  /// The range holding `ptr` and ptr's offset in it, or {null, 0}.
  std::pair<const void*, const range*> containing(const void* ptr) const {
    auto it = map_.upper_bound(ptr);
    if (it == map_.begin()) return {nullptr, nullptr};
    --it;
    if (address(ptr) - address(it->first) >= it->second.bytes) return {nullptr, nullptr};
    return {it->first, &it->second};
  }

  /// Calls f(ptr, range) for every registered range.
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [p, r] : map_) f(p, r);
  }

  /// Forgets every range.
  void clear() { map_.clear(); }

 private:
  static std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

  std::map<const void*, range> map_;
};

}  // namespace htp::cuda
