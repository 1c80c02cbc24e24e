// A static plan's layout (make_static_plan) and the event model that predicts its step.
#include "plan_internal.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>
#include <htp/static_plan.hpp>

#include <algorithm>

namespace htp {
namespace {

constexpr std::size_t arena_alignment = 256;

std::size_t aligned(std::size_t bytes) {
  return (bytes + arena_alignment - 1) / arena_alignment * arena_alignment;
}

/// Fills uses and use_at: the tensors of each position that are not resident, once each.
void collect_uses(const static_plan_input& in, static_plan& plan) {
  plan.use_at.assign(in.positions.size(), -1);
  for (std::size_t p = 0; p < in.positions.size(); ++p) {
    static_use use;
    use.position = p;
    for (const std::size_t t : in.positions[p].tensors) {
      const bool seen = std::find(use.tensors.begin(), use.tensors.end(), t) != use.tensors.end();
      if (!plan.shape.resident[t] && !in.tensors[t].keep && !seen) use.tensors.push_back(t);
    }
    if (use.tensors.empty()) continue;
    plan.use_at[p] = static_cast<std::ptrdiff_t>(plan.uses.size());
    plan.uses.push_back(std::move(use));
  }
}

/// Places resident tensors, then the ring (false when the shape's ring cannot hold the largest
/// use), then the wire buffers, in one arena; packs each use at the ring's cursor.
bool lay_out(const static_plan_input& in, const std::vector<bool>& referenced, static_plan& plan) {
  std::size_t end = 0;
  plan.resident_offset.assign(in.tensors.size(), static_plan::npos);
  for (std::size_t t = 0; t < in.tensors.size(); ++t) {
    if (!referenced[t] || !(plan.shape.resident[t] || in.tensors[t].keep)) continue;
    plan.resident_offset[t] = end;
    end += aligned(in.tensors[t].bytes);
  }
  std::size_t largest = 0, all = 0;
  for (auto& use : plan.uses) {
    for (const std::size_t t : use.tensors) use.bytes += aligned(in.tensors[t].bytes);
    largest = std::max(largest, use.bytes);
    all += use.bytes;
  }
  const std::size_t want = aligned(plan.shape.ring_bytes);
  if (want != 0 && want < largest) return false;
  plan.ring_bytes = want == 0 ? all : std::min(want, all);
  plan.ring_offset = end;
  std::size_t cursor = 0;
  for (auto& use : plan.uses) {
    if (cursor + use.bytes > plan.ring_bytes) cursor = 0;
    std::size_t at = end + cursor;
    for (const std::size_t t : use.tensors) {
      use.offsets.push_back(at);
      at += aligned(in.tensors[t].bytes);
    }
    cursor += use.bytes;
  }
  end += plan.ring_bytes;
  std::size_t wire = 0;  // streamed coded tensors only: resident ones load once, at prime()
  for (const auto& use : plan.uses) {
    for (const std::size_t t : use.tensors) {
      if (in.tensors[t].coded()) wire = std::max(wire, aligned(in.tensors[t].wire_bytes));
    }
  }
  plan.wire_offset = end;
  plan.wire_buffer_bytes = wire;
  plan.arena_bytes = end + 2 * wire;
  return true;
}

/// For each use, the last earlier use (cyclically: this step, then the previous one) that shares
/// bytes with it; its position's end is where the use's load is issued.
void find_frees(static_plan& plan) {
  const std::size_t m = plan.uses.size();
  plan.loads_after.assign(plan.use_at.size(), {});
  auto overlap = [&](const static_use& a, const static_use& b) {
    return a.offsets[0] < b.offsets[0] + b.bytes && b.offsets[0] < a.offsets[0] + a.bytes;
  };
  for (std::size_t i = 0; i < m; ++i) {
    auto& use = plan.uses[i];
    for (std::size_t back = 1; back < m; ++back) {
      const std::size_t j = (i + m - back) % m;
      if (!overlap(use, plan.uses[j])) continue;
      use.freed_by = static_cast<std::ptrdiff_t>(plan.uses[j].position);
      use.carried = j > i;
      break;
    }
  }
  // Issue order at each position: this step's uses first (needed sooner), then carried ones.
  for (const bool carried : {false, true}) {
    for (std::size_t i = 0; i < m; ++i) {
      const auto& use = plan.uses[i];
      if (use.freed_by >= 0 && use.carried == carried) {
        plan.loads_after[static_cast<std::size_t>(use.freed_by)].push_back(i);
      }
    }
  }
}

/// The three in-order lanes of the event model, and the link and decode costs of one piece.
struct lanes {
  explicit lanes(const static_plan_input& input) : in(input) {}
  const static_plan_input& in;
  double compute_free = 0, link_free = 0, decode_free = 0;
  std::vector<double> decoded;  // when each coded piece's decode ended, in issue order

  double copy_ns(std::size_t t) const {
    return in.copy_overhead_ns +
           static_cast<double>(in.tensors[t].link_bytes()) * 1e9 / in.link_bytes_per_second;
  }
  double decode_ns(std::size_t t) const {
    return static_cast<double>(in.tensors[t].bytes) * 1e9 / in.decode_bytes_per_second;
  }
  /// Loads `use` into the ring, its bytes free from `slot_free`; returns when its last piece is in.
  double load(const static_use& use, double slot_free) {
    double ready = slot_free;
    for (const std::size_t t : use.tensors) {
      if (!in.tensors[t].coded()) {
        link_free = std::max(link_free, slot_free) + copy_ns(t);
        ready = std::max(ready, link_free);
        continue;
      }
      // The copy waits for its wire buffer (freed by the decode two pieces back); the decode
      // waits for its copy, the decode before it and the slot.
      const std::size_t n = decoded.size();
      const double buffer_free = n >= 2 ? decoded[n - 2] : 0.0;
      link_free = std::max(link_free, buffer_free) + copy_ns(t);
      decode_free = std::max({decode_free, link_free, slot_free}) + decode_ns(t);
      decoded.push_back(decode_free);
      ready = std::max(ready, decode_free);
    }
    return ready;
  }
};

}  // namespace

double static_prediction::plan_bound_ns() const noexcept {
  return std::max({compute_ns, link_ns, decode_ns});
}

std::size_t static_plan::offset_of(std::size_t t, std::size_t p) const {
  HTP_EXPECTS(t < resident_offset.size() && p < use_at.size(), invalid_argument,
              "static_plan::offset_of(", t, ", ", p, "): no such tensor or position");
  if (resident_offset[t] != npos) return resident_offset[t];
  HTP_EXPECTS(use_at[p] >= 0, invalid_argument, "static_plan::offset_of: position ", p,
              " does not read tensor ", t);
  const auto& use = uses[static_cast<std::size_t>(use_at[p])];
  const auto it = std::find(use.tensors.begin(), use.tensors.end(), t);
  HTP_EXPECTS(it != use.tensors.end(), invalid_argument, "static_plan::offset_of: position ", p,
              " does not read tensor ", t);
  return use.offsets[static_cast<std::size_t>(it - use.tensors.begin())];
}

static_prediction predict_static_step(const static_plan_input& in, const static_plan& plan) {
  static_prediction out;
  lanes l(in);
  std::vector<double> ready(plan.uses.size(), 0.0);  // carried and kept uses: in at the start
  for (std::size_t p = 0; p < in.positions.size(); ++p) {
    double start = l.compute_free;
    const std::ptrdiff_t u = plan.use_at[p];
    if (u >= 0) start = std::max(start, ready[static_cast<std::size_t>(u)]);
    l.compute_free = start + in.positions[p].compute_ns;
    out.compute_ns += in.positions[p].compute_ns;
    for (const std::size_t next : plan.loads_after[p]) {
      const auto& use = plan.uses[next];
      const double in_at = l.load(use, l.compute_free);
      if (!use.carried) ready[next] = in_at;  // a carried use is the next step's
      for (const std::size_t t : use.tensors) {
        out.link_ns += l.copy_ns(t);
        if (in.tensors[t].coded()) out.decode_ns += l.decode_ns(t);
      }
    }
  }
  out.step_ns = std::max({l.compute_free, l.link_free, l.decode_free});
  return out;
}

namespace static_detail {

bool build(const static_plan_input& in, const static_shape& shape,
           const std::vector<bool>& referenced, static_plan& plan) {
  plan = static_plan{};
  plan.shape = shape;
  collect_uses(in, plan);
  if (!lay_out(in, referenced, plan) || plan.arena_bytes > in.hbm_budget) return false;
  find_frees(plan);
  for (const auto& use : plan.uses) {
    if (use.freed_by < 0) continue;
    for (const std::size_t t : use.tensors) plan.streamed_bytes += in.tensors[t].link_bytes();
  }
  plan.predicted = predict_static_step(in, plan);
  return true;
}

}  // namespace static_detail

static_plan make_static_plan(const static_plan_input& in, const static_shape& shape) {
  static_detail::check_input(in);
  HTP_EXPECTS(shape.resident.size() == in.tensors.size(), invalid_argument,
              "make_static_plan: the shape names ", shape.resident.size(),
              " tensors; the input has ", in.tensors.size());
  static_plan plan;
  if (!static_detail::build(in, shape, static_detail::referenced(in), plan)) {
    std::size_t largest = 0;
    for (const auto& use : plan.uses) largest = std::max(largest, use.bytes);
    HTP_EXPECTS(shape.ring_bytes == 0 || aligned(shape.ring_bytes) >= largest, invalid_argument,
                "make_static_plan: a ring of ", shape.ring_bytes,
                " bytes cannot hold the largest use (", largest, " bytes)");
    throw out_of_memory(
        detail::concat("static plan: its arena needs ", plan.arena_bytes,
                       " bytes of HBM (resident tensors ", plan.ring_offset, ", ring ",
                       plan.ring_bytes, ", wire buffers ", 2 * plan.wire_buffer_bytes,
                       ") and the budget is ", in.hbm_budget,
                       " bytes: raise hbm_budget or stream more tensors"),
        plan.arena_bytes);
  }
  return plan;
}

}  // namespace htp
