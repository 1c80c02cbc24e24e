#include "sim/sim_stream.hpp"

#include <htp/error.hpp>

#include <algorithm>
#include <exception>
#include <utility>

namespace htp::sim {

namespace {
thread_local std::chrono::steady_clock::time_point ready_time{};
thread_local std::chrono::steady_clock::time_point completion_time{};
}  // namespace

std::chrono::steady_clock::time_point current_task_ready_time() noexcept { return ready_time; }
void set_current_task_completion(std::chrono::steady_clock::time_point t) noexcept {
  completion_time = t;
}

void signal::set(std::chrono::steady_clock::time_point at) {
  {
    std::lock_guard lock(mutex_);
    set_ = true;
    at_ = at;
  }
  cv_.notify_all();
}

std::optional<std::chrono::steady_clock::time_point> signal::set_at() const {
  std::lock_guard lock(mutex_);
  if (!set_) return std::nullopt;
  return at_;
}

bool signal::is_set() const {
  std::lock_guard lock(mutex_);
  return set_;
}

void signal::wait() const {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return set_; });
}

std::shared_ptr<signal> event::arm() {
  auto s = std::make_shared<signal>();
  std::lock_guard lock(mutex_);
  current_ = s;
  captured_.reset();
  return s;
}

void event::arm_captured(capture_point point) {
  std::lock_guard lock(mutex_);
  current_ = nullptr;
  captured_ = std::move(point);
}

std::shared_ptr<signal> event::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

std::optional<capture_point> event::captured() const {
  std::lock_guard lock(mutex_);
  return captured_;
}

void error_sink::report(const std::string& what) {
  std::lock_guard lock(mutex_);
  if (first_.empty()) first_ = what;
}

void error_sink::rethrow() const {
  std::lock_guard lock(mutex_);
  if (!first_.empty()) {
    throw htp::logic_error("sim device: work queued on a stream failed (sticky, like a CUDA "
                           "context error): " +
                           first_);
  }
}

stream::stream(error_sink& errors, std::size_t queue_limit, std::atomic<std::size_t>* blocked)
    : errors_(errors), queue_limit_(queue_limit), blocked_(blocked), worker_([this] { run(); }) {}

stream::~stream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

void stream::enqueue(std::function<void()> task) {
  {
    std::unique_lock lock(mutex_);
    if (queue_limit_ > 0 && enqueued_ - completed_ >= queue_limit_) {
      // A full device queue: the caller blocks until a task completes.
      if (blocked_ != nullptr) ++*blocked_;
      done_cv_.wait(lock, [&] { return enqueued_ - completed_ < queue_limit_; });
      if (blocked_ != nullptr) --*blocked_;
    }
    queue_.push_back({std::chrono::steady_clock::now(), std::move(task)});
    ++enqueued_;
  }
  work_cv_.notify_one();
}

void stream::synchronize() {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = enqueued_;
  done_cv_.wait(lock, [&] { return completed_ >= target; });
}

void stream::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::function<void()> task = std::move(queue_.front().fn);
    ready_time = std::max(queue_.front().enqueued, last_done_);
    completion_time = {};
    queue_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      errors_.report(e.what());
    } catch (...) {
      errors_.report("a host function threw a non-standard exception");
    }
    task = nullptr;  // release captures before reporting completion
    lock.lock();
    last_done_ = completion_time != std::chrono::steady_clock::time_point{}
                     ? completion_time
                     : std::chrono::steady_clock::now();
    ++completed_;
    done_cv_.notify_all();
  }
}

}  // namespace htp::sim
