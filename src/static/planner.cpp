// plan_static: the search over resident sets and ring sizes (static_plan.hpp), and the bound.
#include "plan_internal.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace htp {
namespace {

/// The best plan seen so far, and the candidates tried.
struct search {
  const static_plan_input& in;
  std::vector<bool> referenced;
  std::vector<std::size_t> tensors;  // the referenced ones: what a shape chooses for
  static_plan best, scratch;
  bool found = false;
  std::size_t evaluations = 0;

  explicit search(const static_plan_input& input)
      : in(input), referenced(static_detail::referenced(input)) {
    for (std::size_t t = 0; t < referenced.size(); ++t) {
      if (referenced[t] && !input.tensors[t].keep) tensors.push_back(t);  // kept: always resident
    }
  }

  /// Less predicted step; on a tie (to 1e-9 relative) the smaller arena, then the smaller ring.
  static bool better(const static_plan& a, const static_plan& b) {
    const double x = a.predicted.step_ns, y = b.predicted.step_ns;
    if (std::abs(x - y) > 1e-9 * std::max(x, y)) return x < y;
    if (a.arena_bytes != b.arena_bytes) return a.arena_bytes < b.arena_bytes;
    return a.ring_bytes < b.ring_bytes;
  }
  /// Builds `shape`; keeps it when it fits and beats the best. False when it does not fit.
  bool consider(const static_shape& shape) {
    ++evaluations;
    if (!static_detail::build(in, shape, referenced, scratch)) return false;
    if (!found || better(scratch, best)) {
      best = scratch;
      found = true;
    }
    return true;
  }
  /// The largest use of `shape` and all its uses together, in ring bytes.
  std::pair<std::size_t, std::size_t> use_extent(static_shape shape) {
    shape.ring_bytes = 0;
    static_detail::build(in, shape, referenced, scratch);
    std::size_t largest = 0;
    for (const auto& use : scratch.uses) largest = std::max(largest, use.bytes);
    return {largest, scratch.ring_bytes};
  }
  /// Ring sizes for `shape`: every multiple of 256 bytes from its largest use to all its uses
  /// (thinned evenly to `most`), or, with `factors`, those multiples of its largest use.
  void consider_rings(static_shape shape, bool factors, std::size_t most = 4096) {
    const auto [largest, all] = use_extent(shape);
    if (largest == 0) {
      consider(shape);  // nothing streamed
      return;
    }
    if (factors) {
      for (const double f : in.ring_factors) {
        shape.ring_bytes =
            std::min(all, static_cast<std::size_t>(f * static_cast<double>(largest)));
        if (shape.ring_bytes >= largest) consider(shape);
      }
      return;
    }
    const std::size_t steps = (all - largest) / 256 + 1, stride = (steps + most - 1) / most;
    for (std::size_t i = 0; i < steps; i += stride) {
      shape.ring_bytes = largest + 256 * i;
      consider(shape);
    }
  }
};

void exhaustive(search& s) {
  const std::size_t n = s.tensors.size();
  // Every ring size while the search stays under ~4M layouts (small cases: all of them).
  const std::size_t rings = std::max<std::size_t>(64, (std::size_t{1} << 22) >> n);
  static_shape shape{std::vector<bool>(s.in.tensors.size(), false), 0};
  for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << n); ++mask) {
    for (std::size_t i = 0; i < n; ++i) shape.resident[s.tensors[i]] = ((mask >> i) & 1) != 0;
    s.consider_rings(shape, false, rings);
  }
}

/// Per position, the tensors only it reads (once): what the heuristic may stream there.
std::vector<std::vector<std::size_t>> streamable(const search& s) {
  std::vector<std::size_t> reads(s.in.tensors.size(), 0);
  for (const auto& p : s.in.positions) {
    for (const std::size_t t : p.tensors) ++reads[t];
  }
  std::vector<std::vector<std::size_t>> out(s.in.positions.size());
  for (std::size_t p = 0; p < out.size(); ++p) {
    for (const std::size_t t : s.in.positions[p].tensors) {
      if (reads[t] == 1 && !s.in.tensors[t].keep) out[p].push_back(t);
    }
  }
  return out;
}

/// The subset of `candidates` with the most bytes at most `cap` (exact up to 12 tensors,
/// largest-first above), marked streamed in `resident`.
void stream_up_to(const static_plan_input& in, const std::vector<std::size_t>& candidates,
                  std::size_t cap, std::vector<bool>& resident) {
  const std::size_t n = candidates.size();
  if (n <= 12) {
    std::uint32_t best_mask = 0;
    std::size_t best_sum = 0;
    for (std::uint32_t mask = 1; mask < (1u << n); ++mask) {
      std::size_t sum = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if ((mask >> i) & 1) sum += in.tensors[candidates[i]].bytes;
      }
      if (sum <= cap && sum > best_sum) best_sum = sum, best_mask = mask;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if ((best_mask >> i) & 1) resident[candidates[i]] = false;
    }
    return;
  }
  std::vector<std::size_t> order = candidates;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return in.tensors[a].bytes > in.tensors[b].bytes;
  });
  std::size_t sum = 0;
  for (const std::size_t t : order) {
    if (sum + in.tensors[t].bytes <= cap) sum += in.tensors[t].bytes, resident[t] = false;
  }
}

/// The per-position caps worth trying: every sum of a subset of one position's streamable tensors
/// (positions of up to 12), thinned evenly to at most 512 values.
std::vector<std::size_t> use_caps(const static_plan_input& in,
                                  const std::vector<std::vector<std::size_t>>& candidates) {
  std::vector<std::size_t> sums;
  for (const auto& c : candidates) {
    const std::size_t n = std::min<std::size_t>(c.size(), 12);
    for (std::uint32_t mask = 1; mask < (1u << n); ++mask) {
      std::size_t sum = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if ((mask >> i) & 1) sum += in.tensors[c[i]].bytes;
      }
      sums.push_back(sum);
    }
  }
  std::sort(sums.begin(), sums.end());
  sums.erase(std::unique(sums.begin(), sums.end()), sums.end());
  if (sums.size() <= 512) return sums;
  std::vector<std::size_t> thinned;
  for (std::size_t i = 0; i < 512; ++i) thinned.push_back(sums[i * (sums.size() - 1) / 511]);
  return thinned;
}

/// Seeds: every position streams the most it can within one cap; and whole positions streamed,
/// spread evenly over the step; each with the ring sizes of ring_factors.
void seed(search& s) {
  const auto candidates = streamable(s);
  const std::vector<bool> all_resident(s.in.tensors.size(), true);
  s.consider({all_resident, 0});
  static_shape streamed{std::vector<bool>(s.in.tensors.size(), false), 0};
  s.consider_rings(streamed, true);
  for (const std::size_t t : s.tensors) {  // all streamed but one (a tied tensor, a large one)
    streamed.resident[t] = true;
    s.consider_rings(streamed, true);
    streamed.resident[t] = false;
  }
  for (const std::size_t cap : use_caps(s.in, candidates)) {
    static_shape shape{all_resident, 0};
    for (const auto& c : candidates) stream_up_to(s.in, c, cap, shape.resident);
    s.consider_rings(shape, true);
  }
  const std::size_t positions = s.in.positions.size();
  for (std::size_t q = 1; q <= positions; ++q) {
    static_shape shape{all_resident, 0};
    for (std::size_t i = 0; i < q; ++i) {
      for (const std::size_t t : candidates[(2 * i + 1) * positions / (2 * q)]) {
        shape.resident[t] = false;
      }
    }
    s.consider_rings(shape, true);
  }
}

/// Moves of one tensor (resident <-> streamed), each with the same ring and with the ring sizes
/// of ring_factors, from the best plan, until a pass improves nothing or the evaluations run out.
void local_search(search& s, std::size_t max_evaluations) {
  for (bool improved = true; improved && s.evaluations < max_evaluations;) {
    const static_shape from = s.best.shape;
    const double before = s.best.predicted.step_ns;
    for (const std::size_t t : s.tensors) {
      static_shape shape = from;
      shape.resident[t] = !shape.resident[t];
      s.consider(shape);
      s.consider_rings(shape, true);
      if (s.evaluations >= max_evaluations) break;
    }
    improved = s.best.predicted.step_ns < before;
  }
}

}  // namespace

double static_step_bound_ns(const static_plan_input& in) {
  static_detail::check_input(in);
  const auto referenced = static_detail::referenced(in);
  double compute = 0;
  for (const auto& p : in.positions) compute += p.compute_ns;
  std::vector<std::size_t> order;
  std::size_t total = 0;
  for (std::size_t t = 0; t < referenced.size(); ++t) {
    if (referenced[t]) order.push_back(t), total += in.tensors[t].bytes;
  }
  if (total <= in.hbm_budget) return compute;
  // Cover the bytes that cannot be resident with the tensors cheapest on the link per HBM byte.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = in.tensors[a];
    const auto& y = in.tensors[b];
    return static_cast<double>(x.link_bytes()) / static_cast<double>(x.bytes) <
           static_cast<double>(y.link_bytes()) / static_cast<double>(y.bytes);
  });
  double deficit = static_cast<double>(total - in.hbm_budget), link = 0;
  for (const std::size_t t : order) {
    if (deficit <= 0) break;
    const auto& x = in.tensors[t];
    const double part = std::min(1.0, deficit / static_cast<double>(x.bytes));
    link += part * static_cast<double>(x.link_bytes()) * 1e9 / in.link_bytes_per_second;
    deficit -= static_cast<double>(x.bytes);
  }
  return std::max(compute, link);
}

static_plan plan_static(const static_plan_input& in) {
  static_detail::check_input(in);
  search s(in);
  const std::size_t n = s.tensors.size();
  if (n < 63 && (std::uint64_t{1} << n) <= in.exhaustive_limit) {
    exhaustive(s);
  } else {
    seed(s);
    if (s.found) local_search(s, s.evaluations + 40 * n * (in.ring_factors.size() + 2) + 1000);
  }
  if (!s.found) {
    // The least arena any plan needs: everything streamed through a ring of the largest use.
    const static_shape all_streamed{std::vector<bool>(in.tensors.size(), false), 0};
    static_plan least;
    static_detail::build(in, {all_streamed.resident, s.use_extent(all_streamed).first},
                         s.referenced, least);
    throw out_of_memory(
        detail::concat("plan_static: no plan fits in an HBM budget of ", in.hbm_budget,
                       " bytes (every tensor streamed through a ring of the largest position "
                       "needs ",
                       least.arena_bytes, " bytes): raise the budget"),
        least.arena_bytes);
  }
  return s.best;
}

}  // namespace htp
