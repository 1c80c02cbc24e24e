// The sim backend's stream capture and executable graphs (device::begin_capture ... end_capture,
// launch_graph). See docs/sim.md, "Capture and replay".
//
// A capture records each operation queued on a capturing stream as a node: the task the stream
// would have run, and the nodes it depends on (CUDA's model: each capturing stream holds the set
// of nodes its next node depends on; a record copies that set into the event, a wait on such an
// event adds it to the waiting stream's set). Each capturing stream is a lane. A graph owns one
// internal sim stream per lane with nodes, so the lanes of a replay run concurrently, as a GPU's
// copy and compute queues do, and every task there runs on a stream worker: modelled link times
// and timing-only mode apply to replayed copies exactly as to direct ones.
#pragma once

#include "sim/sim_stream.hpp"

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace htp::sim {

/// The nodes a node depends on: indices into capture::nodes, ascending.
using dep_set = std::vector<std::size_t>;

/// One captured operation.
struct node {
  std::function<void()> task;  ///< what the stream would have run
  dep_set deps;                ///< nodes that must finish first (besides the replay's start)
  std::size_t lane = 0;        ///< the capturing stream it was queued on
};

/// One stream capture, from begin_capture to end_capture. Not thread-safe: the device guards every
/// capture with one mutex.
class capture {
 public:
  capture(stream* origin, std::thread::id thread) : origin_(origin), thread_(thread) {
    lanes_.push_back({origin, {}});
  }

  stream* origin() const noexcept { return origin_; }
  std::thread::id thread() const noexcept { return thread_; }
  /// Between begin_capture and end_capture (readable without the device's capture mutex).
  bool active() const noexcept { return active_.load(std::memory_order_acquire); }
  void end() noexcept { active_.store(false, std::memory_order_release); }
  /// Why the capture was invalidated; empty while it is valid.
  const std::string& invalid() const noexcept { return invalid_; }
  /// Invalidates the capture (the first reason is kept).
  void invalidate(const std::string& why) {
    if (invalid_.empty()) invalid_ = why;
  }

  /// Records `task` as the next node of `s` (a capturing stream of this capture).
  void add(stream* s, std::function<void()> task);
  /// What an event recorded on `s` now captures: the nodes the next node of `s` would depend on.
  dep_set point_of(stream* s) const;
  /// `s` waits on a capture point: it joins the capture if it had not, and its next node also
  /// depends on `point`.
  void join(stream* s, const dep_set& point);
  /// The streams of the capture, the origin first.
  std::vector<stream*> streams() const;
  /// Empty when every joined stream has been joined back to the origin (each node a joined stream
  /// would depend on next is the origin's next dependency or one of its ancestors); otherwise
  /// says which stream is not.
  std::string unjoined() const;
  /// Moves the nodes out (end_capture).
  std::vector<node> take_nodes() { return std::move(nodes_); }
  std::size_t lane_count() const noexcept { return lanes_.size(); }

 private:
  struct lane {
    stream* s;
    dep_set next;  ///< what the lane's next node depends on
  };
  lane* find(stream* s);
  const lane* find(stream* s) const;

  stream* origin_;
  std::thread::id thread_;
  std::atomic<bool> active_{true};
  std::string invalid_;
  std::vector<node> nodes_;
  std::vector<lane> lanes_;  // lanes_[0]: the origin
};

/// An executable graph: the nodes of an ended capture and one worker stream per lane with nodes.
class graph {
 public:
  /// `errors` is the device's sink: a failing node is a sticky error, as on the device's streams.
  graph(std::vector<node> nodes, std::size_t lanes, error_sink& errors);
  /// Waits for every queued replay, then joins the lanes' workers.
  ~graph();
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;

  /// Queues one replay after the work queued on `s`; later work on `s` waits for all of it. The
  /// replay also waits for the previous one (queued on any stream) to finish. Thread-safe.
  void launch(stream& s);

 private:
  std::vector<node> nodes_;
  std::vector<std::vector<std::size_t>> lane_nodes_;  // per lane with nodes: its nodes, in order
  std::vector<std::unique_ptr<stream>> lanes_;
  std::mutex launch_mutex_;
  std::vector<std::shared_ptr<signal>> last_ends_;  // the previous replay's lane ends
};

}  // namespace htp::sim
