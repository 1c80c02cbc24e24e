// Memory tiers: where a tensor's bytes can live. Used by the slab allocators, the transfer engine
// and the pager. A third tier (NVMe) would be one more enumerator and one more row wherever tiers
// are dispatched on.
#pragma once

#include <htp/device.hpp>

namespace htp {

/// A memory tier.
enum class tier {
  hbm,   ///< GPU memory (device memory_kind::device).
  host,  ///< pinned host memory (device memory_kind::pinned_host).
};

/// Returns "hbm" or "host".
inline const char* to_string(tier t) noexcept { return t == tier::hbm ? "hbm" : "host"; }

/// The kind of device memory that backs a tier.
inline memory_kind memory_kind_of(tier t) noexcept {
  return t == tier::hbm ? memory_kind::device : memory_kind::pinned_host;
}

}  // namespace htp
