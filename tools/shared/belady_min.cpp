#include "shared/belady_min.hpp"

#include <iterator>
#include <set>
#include <utility>

namespace htp::bench {

void belady_walk(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity,
                 std::size_t cycles, const belady_miss_fn& on_miss) {
  const std::size_t n = sizes.size();
  // Resident tensors keyed by their next use (absolute time); the farthest is evicted first.
  std::set<std::pair<std::uint64_t, std::size_t>> resident;
  std::vector<std::uint64_t> next(n, 0);
  std::vector<bool> in(n, false);
  std::vector<std::size_t> victims;
  std::uint64_t used = 0;
  for (std::size_t c = 0; c < cycles; ++c) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t now = static_cast<std::uint64_t>(c) * n + i;
      if (in[i]) {
        resident.erase({next[i], i});
      } else {
        victims.clear();
        while (used + sizes[i] > capacity && !resident.empty()) {
          const auto victim = std::prev(resident.end());
          used -= sizes[victim->second];
          in[victim->second] = false;
          victims.push_back(victim->second);
          resident.erase(victim);
        }
        used += sizes[i];
        in[i] = true;
        on_miss(c, i, victims);
      }
      next[i] = now + n;  // each tensor is used once per cycle
      resident.insert({next[i], i});
    }
  }
}

double belady_bytes_per_cycle(const std::vector<std::uint64_t>& sizes, std::uint64_t capacity) {
  const std::size_t n = sizes.size();
  std::uint64_t total = 0;
  for (auto b : sizes) total += b;
  if (total <= capacity || n == 0) return 0;
  for (auto b : sizes) {
    if (b > capacity) return -1;  // cannot run at all
  }
  // Two cycles of warm-up, then n - 1 measured ones: on a cyclic sweep the pattern of evictions
  // repeats every n - 1 cycles (equal sizes), so their mean is exact there.
  const std::size_t warm = 2, measured = n > 1 ? n - 1 : 1;
  std::uint64_t moved = 0;
  belady_walk(sizes, capacity, warm + measured,
              [&](std::size_t c, std::size_t i, const std::vector<std::size_t>&) {
                if (c >= warm) moved += sizes[i];
              });
  return static_cast<double>(moved) / static_cast<double>(measured);
}

std::uint64_t belady_trace_bytes(const std::vector<std::uint64_t>& footprint,
                                 const std::vector<std::uint64_t>& counted,
                                 const std::vector<std::size_t>& trace, std::uint64_t capacity,
                                 std::size_t from) {
  const std::size_t n = footprint.size(), len = trace.size();
  constexpr std::uint64_t never = ~std::uint64_t{0};
  // next_use[t]: the position of the next access to trace[t]'s tensor after t (never: none).
  std::vector<std::uint64_t> next_use(len, never), upcoming(n, never);
  for (std::size_t t = len; t-- > 0;) {
    next_use[t] = upcoming[trace[t]];
    upcoming[trace[t]] = t;
  }
  // Resident tensors keyed by their next use; the farthest (never last of all) is evicted first.
  std::set<std::pair<std::uint64_t, std::size_t>> resident;
  std::vector<std::uint64_t> key(n, 0);
  std::vector<bool> in(n, false);
  std::uint64_t used = 0, moved = 0;
  for (std::size_t t = 0; t < len; ++t) {
    const std::size_t i = trace[t];
    if (in[i]) {
      resident.erase({key[i], i});
    } else {
      while (used + footprint[i] > capacity && !resident.empty()) {
        const auto victim = std::prev(resident.end());
        used -= footprint[victim->second];
        in[victim->second] = false;
        resident.erase(victim);
      }
      used += footprint[i];
      in[i] = true;
      if (t >= from) moved += counted[i];
    }
    key[i] = next_use[t];
    resident.insert({key[i], i});
  }
  return moved;
}

}  // namespace htp::bench
