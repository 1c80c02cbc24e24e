// plan_static: the search over resident sets and slot counts (static_plan.hpp), and the bound.
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
      if (referenced[t]) tensors.push_back(t);
    }
  }

  /// Less predicted step; on a tie (to 1e-9 relative) the smaller arena, then fewer slots.
  static bool better(const static_plan& a, const static_plan& b) {
    const double x = a.predicted.step_ns, y = b.predicted.step_ns;
    if (std::abs(x - y) > 1e-9 * std::max(x, y)) return x < y;
    if (a.arena_bytes != b.arena_bytes) return a.arena_bytes < b.arena_bytes;
    return a.slots < b.slots;
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
  /// Every slot count up to max_slots (or the shape's use count, past which plans are equal).
  void consider_slot_counts(static_shape shape) {
    for (std::size_t k = 1; k <= in.max_slots; ++k) {
      shape.slots = k;
      consider(shape);
      if (scratch.slots < k) break;  // k exceeds the uses: larger k lays out the same plan
    }
  }
};

void exhaustive(search& s) {
  const std::size_t n = s.tensors.size();
  static_shape shape{std::vector<bool>(s.in.tensors.size(), false), 1};
  for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << n); ++mask) {
    for (std::size_t i = 0; i < n; ++i) shape.resident[s.tensors[i]] = ((mask >> i) & 1) != 0;
    s.consider_slot_counts(shape);
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
      if (reads[t] == 1) out[p].push_back(t);
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
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return in.tensors[a].bytes > in.tensors[b].bytes; });
  std::size_t sum = 0;
  for (const std::size_t t : order) {
    if (sum + in.tensors[t].bytes <= cap) sum += in.tensors[t].bytes, resident[t] = false;
  }
}

/// The slot sizes worth trying: every sum of a subset of one position's streamable tensors
/// (positions of up to 12), thinned evenly to at most 512 values.
std::vector<std::size_t> slot_sizes(const static_plan_input& in,
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

/// Seeds: every position streams the most it can within one slot size; and whole positions
/// streamed, spread evenly over the step.
void seed(search& s) {
  const auto candidates = streamable(s);
  const std::vector<bool> all_resident(s.in.tensors.size(), true);
  s.consider({all_resident, 1});
  s.consider_slot_counts({std::vector<bool>(s.in.tensors.size(), false), 1});
  for (const std::size_t cap : slot_sizes(s.in, candidates)) {
    static_shape shape{all_resident, 1};
    for (const auto& c : candidates) stream_up_to(s.in, c, cap, shape.resident);
    s.consider_slot_counts(shape);
  }
  const std::size_t positions = s.in.positions.size();
  for (std::size_t q = 1; q <= positions; ++q) {
    static_shape shape{all_resident, 1};
    for (std::size_t i = 0; i < q; ++i) {
      for (const std::size_t t : candidates[(2 * i + 1) * positions / (2 * q)]) {
        shape.resident[t] = false;
      }
    }
    s.consider_slot_counts(shape);
  }
}

/// Moves of one tensor (resident <-> streamed), each with the slot count -1, same, +1, from the
/// best plan, until a pass improves nothing or the evaluations run out.
void local_search(search& s, std::size_t max_evaluations) {
  for (bool improved = true; improved && s.evaluations < max_evaluations;) {
    improved = false;
    const static_shape from = s.best.shape;
    const double before = s.best.predicted.step_ns;
    for (const std::size_t t : s.tensors) {
      static_shape shape = from;
      shape.resident[t] = !shape.resident[t];
      for (std::size_t k = std::max<std::size_t>(from.slots, 2) - 1;
           k <= std::min(from.slots + 1, s.in.max_slots); ++k) {
        shape.slots = k;
        s.consider(shape);
      }
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
  HTP_EXPECTS(in.max_slots >= 1, invalid_argument, "plan_static: max_slots must be at least 1");
  search s(in);
  const std::size_t n = s.tensors.size();
  if (n < 63 && (std::uint64_t{1} << n) <= in.exhaustive_limit) {
    exhaustive(s);
  } else {
    seed(s);
    if (s.found) local_search(s, s.evaluations + 40 * n * 3 + 1000);
  }
  if (!s.found) {
    // The least arena any plan needs: everything streamed, one slot.
    static_plan least;
    static_detail::build(in, {std::vector<bool>(in.tensors.size(), false), 1}, s.referenced,
                         least);
    throw out_of_memory(
        detail::concat("plan_static: no plan fits in an HBM budget of ", in.hbm_budget,
                       " bytes; the smallest (every tensor streamed through one slot) needs ",
                       least.arena_bytes, " bytes: raise the budget"),
        least.arena_bytes);
  }
  return s.best;
}

}  // namespace htp
