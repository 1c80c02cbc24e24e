#include <htp/detail/allocation_registry.hpp>
#include <htp/detail/check.hpp>

namespace htp::detail {

void allocation_registry::remove(memory_kind kind, void* ptr, std::size_t bytes) {
  auto it = map_.find(ptr);
  HTP_EXPECTS(it != map_.end(), invalid_argument, "deallocate(", to_string(kind), ", ", ptr, ", ",
              bytes,
              "): the pointer was not returned by allocate on this device (or was already freed)");
  HTP_EXPECTS(it->second.kind == kind, invalid_argument, "deallocate(", to_string(kind), ", ", ptr,
              "): the pointer is ", to_string(it->second.kind),
              " memory; pass the kind it was allocated with");
  HTP_EXPECTS(it->second.bytes == bytes, invalid_argument, "deallocate(", to_string(kind), ", ",
              ptr, ", ", bytes, "): it was allocated with ", it->second.bytes,
              " bytes; pass the same size");
  map_.erase(it);
}

const allocation_registry::entry* allocation_registry::find_containing(const void* ptr,
                                                                       std::size_t bytes) const {
  auto it = map_.upper_bound(const_cast<void*>(ptr));
  if (it == map_.begin()) return nullptr;
  --it;
  const auto* base = static_cast<const char*>(it->first);
  const auto* p = static_cast<const char*>(ptr);
  if (p < base || p + bytes > base + it->second.bytes) return nullptr;
  return &it->second;
}

}  // namespace htp::detail
