// Gradient reduction on the reduction stream: see include/htp/gradient_reducer.hpp,
// Note [Gradient reduction].
#include <htp/gradient_reducer.hpp>

#include <htp/detail/check.hpp>

#include "nvtx_range.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>
#include <vector>

namespace htp {

namespace {

/// One step's timed events: each reduction's begin and end on the reduction stream, and the
/// compute stream's last work before the step's join.
struct step_events {
  std::vector<std::pair<event_ref, event_ref>> reductions;
  event_ref compute_end{};
  bool counted = true;  // false once reset_metrics() dropped it from the figures
};

double ms_of(std::chrono::nanoseconds ns) {
  return std::chrono::duration<double, std::milli>(ns).count();
}

}  // namespace

struct gradient_reducer::impl {
  device& dev;
  collectives& coll;
  std::size_t rank;
  stream_ref rs;
  event_ref ready, joined;         // untimed: compute -> reduction, reduction -> compute
  event_ref last_end{};            // the last reduction's end (the destructor waits for it)
  step_events current;             // the step being queued
  std::deque<step_events> queued;  // joined, not yet collected
  std::vector<event_ref> spare;    // timed events free for reuse
  std::vector<event_ref> all;      // every timed event made (destroyed at the end)
  gradient_reduction_metrics m;

  impl(device& d, collectives& c, std::size_t r, stream_ref s)
      : dev(d), coll(c), rank(r), rs(s), ready(d.create_event()), joined(d.create_event()) {}

  event_ref take_timed() {
    if (!spare.empty()) {
      const event_ref e = spare.back();
      spare.pop_back();
      return e;
    }
    all.push_back(dev.create_timed_event());
    return all.back();
  }

  /// The reduction stream waits for compute, then `collective` runs between two timed events.
  template <class F>
  void reduce(stream_ref compute, F&& collective) {
    dev.record(ready, compute);
    dev.wait(ready, rs);
    const event_ref begin = take_timed();
    try {
      dev.record(begin, rs);
      collective();
    } catch (...) {
      spare.push_back(begin);  // recorded, never waited on: free to reuse
      throw;
    }
    const event_ref end = take_timed();
    dev.record(end, rs);
    current.reductions.emplace_back(begin, end);
    last_end = end;
  }

  /// Adds the joined steps whose events have completed to the figures, oldest first; their events
  /// go back to the spare pool. Stops at the first step still running.
  void collect() {
    while (!queued.empty()) {
      step_events& s = queued.front();
      const auto exposed = dev.elapsed(s.compute_end, s.reductions.back().second);
      if (!exposed)
        return;  // the last reduction (in stream order: all of them) or compute not done
      if (s.counted) {
        double red = 0;
        for (const auto& [b, e] : s.reductions)
          red += ms_of(dev.elapsed(b, e).value_or(std::chrono::nanoseconds(0)));
        const double exp = std::min(red, std::max(0.0, ms_of(*exposed)));
        m.reduction_ms += red;
        m.exposed_ms += exp;
        m.hidden_ms += red - exp;
        ++m.steps;
      }
      recycle(s);
      queued.pop_front();
    }
  }

  void recycle(const step_events& s) {
    for (const auto& [b, e] : s.reductions) {
      spare.push_back(b);
      spare.push_back(e);
    }
    if (s.compute_end.native != nullptr) spare.push_back(s.compute_end);
  }
};

gradient_reducer::gradient_reducer(device& dev, collectives& coll, std::size_t rank,
                                   stream_ref reduction) {
  HTP_EXPECTS(rank < coll.size(), invalid_argument, "gradient_reducer: rank ", rank, " of ",
              coll.size(), " ranks; give this GPU's rank in the collectives");
  HTP_EXPECTS(reduction.native != nullptr, invalid_argument,
              "gradient_reducer: a null reduction stream; give a stream of the device (e.g. the "
              "pager's engine().reduction_stream())");
  p_ = std::make_unique<impl>(dev, coll, rank, reduction);
}

gradient_reducer::~gradient_reducer() {
  impl& s = *p_;
  try {
    if (s.last_end.native != nullptr) s.dev.synchronize(s.last_end);
  } catch (...) {  // a failed device: nothing more to wait for
  }
  for (event_ref e : s.all) s.dev.destroy_event(e);
  s.dev.destroy_event(s.ready);
  s.dev.destroy_event(s.joined);
}

void gradient_reducer::all_reduce(void* grad, std::size_t count, element_type type,
                                  stream_ref compute) {
  const detail::nvtx_range range("htp gradient all_reduce");
  impl& s = *p_;
  HTP_EXPECTS(grad != nullptr && count > 0, invalid_argument,
              "gradient_reducer::all_reduce: a null gradient or a count of 0");
  s.reduce(compute, [&] { s.coll.all_reduce_sum(s.rank, grad, grad, count, type, s.rs); });
  ++s.m.all_reduces;
  s.m.bytes += count * size_of(type);
}

void gradient_reducer::reduce_scatter(const void* grad, void* shard, std::size_t count,
                                      element_type type, stream_ref compute) {
  const detail::nvtx_range range("htp gradient reduce_scatter");
  impl& s = *p_;
  HTP_EXPECTS(grad != nullptr && shard != nullptr && count > 0, invalid_argument,
              "gradient_reducer::reduce_scatter: a null gradient or shard, or a count of 0");
  s.reduce(compute, [&] { s.coll.reduce_scatter_sum(s.rank, grad, shard, count, type, s.rs); });
  ++s.m.reduce_scatters;
  s.m.bytes += count * size_of(type) * s.coll.size();
}

void gradient_reducer::join(stream_ref compute) {
  impl& s = *p_;
  if (s.current.reductions.empty()) {  // nothing to wait for; the next step starts afresh
    s.current.counted = true;
    return;
  }
  const event_ref compute_end = s.take_timed();
  s.dev.record(compute_end, compute);
  s.dev.record(s.joined, s.rs);
  s.dev.wait(s.joined, compute);
  s.current.compute_end = compute_end;
  s.queued.push_back(std::move(s.current));
  s.current = step_events{};
  s.collect();
}

gradient_reduction_metrics gradient_reducer::metrics() {
  p_->collect();
  return p_->m;
}

void gradient_reducer::reset_metrics() {
  impl& s = *p_;
  s.collect();
  for (step_events& q : s.queued) q.counted = false;
  if (!s.current.reductions.empty()) s.current.counted = false;  // a step half queued
  s.m = gradient_reduction_metrics{};
}

}  // namespace htp
