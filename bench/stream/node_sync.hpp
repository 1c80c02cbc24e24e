// htp-stream-bench --gpus N: what the GPU threads synchronise and time with. See node_runner.hpp.
#pragma once

#include <htp/device.hpp>
#include <htp/error.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

namespace htp::bench::node_run {

using clock_type = std::chrono::steady_clock;

/// Host functions on a stream stamping the stream thread's clock: device-side durations on sim.
struct stamps {
  std::mutex mu;
  std::vector<double> ms;
  clock_type::time_point begin;
  void mark_begin(device& d, stream_ref s) {
    d.launch_host_func([this] { begin = clock_type::now(); }, s);
  }
  void mark_end(device& d, stream_ref s) {
    d.launch_host_func(
        [this] {
          const double x =
              std::chrono::duration<double, std::milli>(clock_type::now() - begin).count();
          std::lock_guard lock(mu);
          ms.push_back(x);
        },
        s);
  }
};

/// All of `n` threads wait here until the last arrives (C++17 has no std::barrier). One use.
/// Abortable: once one thread has failed, the others never arrive, so abort() lets every waiter
/// (and every later arrival) go with an error instead.
class one_time_barrier {
 public:
  explicit one_time_barrier(std::size_t n) : left_(n) {}
  /// Blocks until all n threads have arrived. @throws htp::logic_error once aborted.
  void arrive_and_wait() {
    std::unique_lock lock(mu_);
    if (!aborted_ && --left_ == 0) {
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return left_ == 0 || aborted_; });
    if (left_ != 0)
      throw logic_error("another GPU failed before every GPU reached the barrier (see its error)");
  }
  /// Releases the waiters and later arrivals, which throw. Thread-safe, idempotent.
  void abort() noexcept {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t left_;
  bool aborted_ = false;
};

}  // namespace htp::bench::node_run
