// The sim backend's streams and events: one worker thread per stream running its queue in order;
// events as shared completion signals.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace htp::sim {

/// A one-shot completion flag. Set once by the stream that reaches it; waited on by host threads
/// and by other streams' workers.
class signal {
 public:
  /// Sets it; `at` is when, on the modelled device (what a timed event reports).
  void set(std::chrono::steady_clock::time_point at = {});
  bool is_set() const;
  void wait() const;
  /// When it was set (the time given to set), if it was.
  std::optional<std::chrono::steady_clock::time_point> set_at() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool set_ = false;
  std::chrono::steady_clock::time_point at_{};
};

class capture;  // sim_graph.hpp

/// Where an event was recorded on a capturing stream: the stream capture, and the captured nodes
/// (indices into the capture's nodes) that a stream waiting on the event would depend on.
struct capture_point {
  std::shared_ptr<capture> in;
  std::vector<std::size_t> deps;
};

/// A sim event: the signal of its most recent record (null when never recorded), or, when it was
/// last recorded on a capturing stream, that capture point instead.
class event {
 public:
  explicit event(bool timed = false) : timed_(timed) {}
  /// Made by create_timed_event: elapsed() may read it.
  bool timed() const noexcept { return timed_; }
  /// Replaces the capture with a fresh signal and returns it; the recording stream sets it.
  std::shared_ptr<signal> arm();
  /// Replaces the capture with a capture point (record on a capturing stream): no signal.
  void arm_captured(capture_point point);
  /// The current capture, or null when never recorded (or last recorded in a stream capture).
  std::shared_ptr<signal> current() const;
  /// The capture point of the last record, if it was made on a capturing stream.
  std::optional<capture_point> captured() const;

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<signal> current_;
  std::optional<capture_point> captured_;
  bool timed_ = false;
};

/// Collects the first error thrown by work on any stream of a device, like CUDA's sticky errors.
class error_sink {
 public:
  void report(const std::string& what);
  /// Throws htp::logic_error if an error was reported.
  void rethrow() const;

 private:
  mutable std::mutex mutex_;
  std::string first_;
};

/// When the task now running on this thread's stream became ready to run: the later of its
/// enqueueing and the previous task's completion. What a modelled copy engine would see.
std::chrono::steady_clock::time_point current_task_ready_time() noexcept;
/// Called by a task that models device work: the work finished at `t` on the modelled device,
/// even if the worker thread overslept past it. The next task on the stream is ready from `t`.
void set_current_task_completion(std::chrono::steady_clock::time_point t) noexcept;

/// A stream: a worker thread that runs queued tasks strictly in order.
class stream {
 public:
  /// `queue_limit` > 0 models a device queue of that depth: enqueue blocks while that many tasks
  /// (the running one included) are queued, as a CUDA launch does when a stream's queue is full.
  /// `blocked` (optional) counts the threads blocked in enqueue on a full queue right now.
  explicit stream(error_sink& errors, std::size_t queue_limit = 0,
                  std::atomic<std::size_t>* blocked = nullptr);
  ~stream();  ///< drains the queue, then joins the worker.
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// Queues a task; blocks while the queue is at its limit. Thread-safe.
  void enqueue(std::function<void()> task);
  /// Blocks until every task queued before this call has run.
  void synchronize();

 private:
  void run();

  error_sink& errors_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  struct queued_task {
    std::chrono::steady_clock::time_point enqueued;
    std::function<void()> fn;
  };
  std::deque<queued_task> queue_;
  std::chrono::steady_clock::time_point last_done_{};
  std::uint64_t enqueued_ = 0;
  std::uint64_t completed_ = 0;
  bool stopping_ = false;
  std::size_t queue_limit_ = 0;
  std::atomic<std::size_t>* blocked_ = nullptr;
  std::thread worker_;
};

}  // namespace htp::sim
