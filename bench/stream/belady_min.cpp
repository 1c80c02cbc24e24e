#include "belady_min.hpp"

#include <iterator>
#include <set>
#include <utility>

namespace htp::bench {

double belady_bytes_per_cycle(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity) {
  const std::size_t n = sizes.size();
  std::uint64_t total = 0;
  for (auto b : sizes) total += b;
  if (total <= capacity || n == 0) return 0;
  for (auto b : sizes) {
    if (b > capacity) return -1;  // cannot run at all
  }
  // Resident tensors keyed by their next use (absolute time); the farthest is evicted first.
  std::set<std::pair<std::uint64_t, std::size_t>> resident;
  std::vector<std::uint64_t> next(n, 0);
  std::vector<bool> in(n, false);
  std::uint64_t used = 0, moved = 0;
  // Two cycles of warm-up, then n - 1 measured ones: on a cyclic sweep the pattern of evictions
  // repeats every n - 1 cycles (equal sizes), so their mean is exact there.
  const std::size_t warm = 2, measured = n > 1 ? n - 1 : 1;
  for (std::size_t c = 0; c < warm + measured; ++c) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t now = static_cast<std::uint64_t>(c) * n + i;
      if (in[i]) {
        resident.erase({next[i], i});
      } else {
        while (used + sizes[i] > capacity) {
          const auto victim = std::prev(resident.end());
          used -= sizes[victim->second];
          in[victim->second] = false;
          resident.erase(victim);
        }
        used += sizes[i];
        in[i] = true;
        if (c >= warm) moved += sizes[i];
      }
      next[i] = now + n;  // each tensor is used once per cycle
      resident.insert({next[i], i});
    }
  }
  return static_cast<double>(moved) / static_cast<double>(measured);
}

}  // namespace htp::bench
