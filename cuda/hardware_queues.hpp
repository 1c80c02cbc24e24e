// CUDA_DEVICE_MAX_CONNECTIONS: how many hardware queues a CUDA context gets, and what htp can know
// about the value in effect. The driver reads the variable when it creates a context, so htp's own
// setting (32) only counts when htp is first to create the context and the host program left the
// variable unset. Included only by cuda_device.cpp.
#pragma once

#include "driver_api.hpp"

#include <htp/error.hpp>

#include "log.hpp"

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace htp::cuda {

/// Queues htp asks for: the maximum, so that a stream parked on a value word (cuStreamWaitValue32)
/// rarely shares a queue with the work that would release it.
inline constexpr int wanted_connections = 32;
/// Below this many queues a parked stream is likely to block the copy or kernel it waits for
/// (with 1, every stream shares one queue: the first wait on a word written later deadlocks).
inline constexpr int risky_connections = 4;
/// The driver's value when the variable is unset.
inline constexpr int default_connections = 8;

/// What htp saw before it touched CUDA, recorded once per process.
struct queue_facts {
  bool user_set = false;   ///< the variable was in the environment before htp set it
  std::string user_value;  ///< its text then
  /// Per runtime ordinal: the primary context was already active (1), not (0), unknown (-1).
  std::vector<int> active_before;
};

/// Number of queues a value of the variable gives: clamped to the driver's 1..32; `fallback` when
/// the text is not a positive integer.
inline int parse_connections(const std::string& text, int fallback) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || v < 1) return fallback;
  return v > 32 ? 32 : static_cast<int>(v);
}

/// The queues a context has, from what htp knows: the host program's value wins when it set one;
/// otherwise 32 if htp's setting was in the environment when the context was created, else the
/// driver default (the context predates htp).
inline int effective_connections(const queue_facts& f, bool context_predates_htp) {
  if (f.user_set) return parse_connections(f.user_value, default_connections);
  return context_predates_htp ? default_connections : wanted_connections;
}

/// Records the environment and which primary contexts are active, then sets
/// CUDA_DEVICE_MAX_CONNECTIONS=32 unless already set; only the first call in a process does
/// anything. Call before any other CUDA call of htp. Never throws.
inline const queue_facts& widen_hardware_queues() noexcept {
  static const queue_facts facts = [] {
    queue_facts f;
    if (const char* v = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) {
      f.user_set = true;
      f.user_value = v;
    } else {
      setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {  // creates no context
      (void)cudaGetLastError();
      return f;
    }
    try {
      const driver_api& d = driver_api::get();
      for (int i = 0; i < n; ++i) f.active_before.push_back(d.primary_context_active(i));
    } catch (...) {
      // An old driver: make_cuda_device reports it; nothing to record here.
    }
    return f;
  }();
  return facts;
}

/// Logs, once per ordinal, what CUDA_DEVICE_MAX_CONNECTIONS the context of `ordinal` has: a
/// warning naming the fix when it is below risky_connections, a note when htp's 32 had no effect.
/// Returns the effective number of queues (the driver may still allocate fewer).
inline int report_hardware_queues(int ordinal) {
  const queue_facts& f = widen_hardware_queues();
  const int before = ordinal >= 0 && static_cast<std::size_t>(ordinal) < f.active_before.size()
                         ? f.active_before[static_cast<std::size_t>(ordinal)]
                         : -1;
  const bool predates = before == 1;
  const int n = effective_connections(f, predates);
  static std::mutex mutex;
  static std::set<int> reported;
  std::lock_guard lock(mutex);
  if (!reported.insert(ordinal).second) return n;
  if (n == 1) {
    // Every stream shares one queue: a compute stream parked on a value word blocks the copy that
    // would write it, on the first fault. Refuse rather than hang, unless told otherwise.
    const char* allow = std::getenv("HTP_ALLOW_ONE_HARDWARE_QUEUE");
    if (allow == nullptr || std::string(allow) != "1") {
      reported.erase(ordinal);
      throw cuda_error(0, "htp_one_hardware_queue", "make_device", __FILE__, __LINE__,
                       "GPU " + std::to_string(ordinal) +
                           " has 1 hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=" + f.user_value +
                           "): htp's device-side waits would deadlock on the first page fault. Set "
                           "CUDA_DEVICE_MAX_CONNECTIONS=32 (at least 4) before the process's first "
                           "CUDA call, or HTP_ALLOW_ONE_HARDWARE_QUEUE=1 to run anyway");
    }
  }
  if (n < risky_connections) {
    detail::logger().warn(
        "GPU {} has {} hardware queue(s) (CUDA_DEVICE_MAX_CONNECTIONS={} was set by the host "
        "program{}). htp parks streams on value words (cuStreamWaitValue32); with fewer than {} "
        "queues a parked stream can block the copy or kernel that would release it and the GPU "
        "deadlocks. Set CUDA_DEVICE_MAX_CONNECTIONS=32 (at least {}) in the environment before the "
        "process makes its first CUDA call.",
        ordinal, n, f.user_value, predates ? ", and its CUDA context existed before htp" : "",
        risky_connections, risky_connections);
  } else if (predates && !f.user_set) {
    detail::logger().info(
        "GPU {}'s CUDA context was created before htp, so htp's CUDA_DEVICE_MAX_CONNECTIONS=32 "
        "had no effect: it has the driver's default of {} hardware queues. To get 32, set the "
        "variable before the first CUDA call of the process.",
        ordinal, default_connections);
  } else if (f.user_set && n < wanted_connections) {
    detail::logger().info(
        "GPU {} uses CUDA_DEVICE_MAX_CONNECTIONS={} from the environment (htp would "
        "set 32; a user's value wins)",
        ordinal, f.user_value);
  }
  return n;
}

}  // namespace htp::cuda
