#include "belady_min.hpp"

#include <set>
#include <utility>

namespace htp::bench {

std::uint64_t belady_bytes_per_cycle(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity) {
  const std::size_t n = sizes.size();
  std::uint64_t total = 0;
  for (auto b : sizes) total += b;
  if (total <= capacity || n == 0) return 0;
  // Resident tensors keyed by their next use (absolute time); the farthest is evicted first.
  std::set<std::pair<std::uint64_t, std::size_t>> resident;
  std::vector<std::uint64_t> next(n, 0);
  std::vector<bool> in(n, false);
  std::uint64_t used = 0, moved = 0;
  const int cycles = 4;  // the last one is measured: steady state after a few
  for (int c = 0; c < cycles; ++c) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t now = static_cast<std::uint64_t>(c) * n + i;
      if (in[i]) {
        resident.erase({next[i], i});
      } else {
        if (sizes[i] > capacity) return ~std::uint64_t{0};  // cannot run at all
        while (used + sizes[i] > capacity) {
          const auto victim = std::prev(resident.end());
          used -= sizes[victim->second];
          in[victim->second] = false;
          resident.erase(victim);
        }
        used += sizes[i];
        in[i] = true;
        if (c == cycles - 1) moved += sizes[i];
      }
      next[i] = now + n;  // each tensor is used once per cycle
      resident.insert({next[i], i});
    }
  }
  return moved;
}

}  // namespace htp::bench
