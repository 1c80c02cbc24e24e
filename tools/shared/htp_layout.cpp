#include "shared/htp_layout.hpp"

#include <algorithm>

namespace htp::bench {

std::uint64_t htp_tensor_bytes(std::uint64_t bytes, std::uint64_t page) noexcept {
  return bytes >= page / 2 ? (bytes + page - 1) / page * page : bytes + bytes / 4 + 256;
}

int resident_layers(std::uint64_t budget, std::uint64_t shard_layer_bytes,
                    std::size_t tensors_per_layer, std::uint64_t page, std::uint64_t slab,
                    int layers, bool window) noexcept {
  const std::uint64_t per_layer = shard_layer_bytes + tensors_per_layer * page;
  const std::uint64_t keep_free = window ? 3 * per_layer + 4 * slab : 0;
  if (per_layer == 0 || budget < keep_free || (window && budget == keep_free)) return 0;
  return static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(layers),
                                                  (budget - keep_free) / per_layer));
}

std::vector<bool> paged_layers(int layers, int resident) {
  const int paged = layers - resident;
  std::vector<bool> out(static_cast<std::size_t>(layers), resident == 0);
  for (int k = 0; k < paged && resident > 0; ++k)
    out[static_cast<std::size_t>((2 * k + 1) * layers / (2 * paged))] = true;
  return out;
}

}  // namespace htp::bench
