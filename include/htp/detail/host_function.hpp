// Host functions must not call into the device: the thread-local mark both backends set while one
// runs, and the check every device member makes. For htp's own sources; it is not installed.
#pragma once

namespace htp::detail {

/// Marks the calling thread as running a host function queued with device::launch_host_func, for
/// the scope's lifetime: both backends run every such function inside one (sim's stream worker,
/// cuda's callback trampoline), so check_not_in_host_function can refuse a device call made from
/// it. Scopes nest. Not copyable.
class host_function_scope {
 public:
  host_function_scope() noexcept;
  ~host_function_scope();
  host_function_scope(const host_function_scope&) = delete;
  host_function_scope& operator=(const host_function_scope&) = delete;
};

/// Refuses a device call from inside a host function (see host_function_scope). CUDA forbids any
/// runtime or driver call from a stream callback: it may return cudaErrorNotPermitted but need
/// not, and a call that waits on the callback's own stream deadlocks. Both backends call this
/// first in every device member that may reach the runtime, so the breach is reported the same
/// way on both. `call` names the member in the message. Cheap (one thread-local read).
/// @throws htp::logic_error naming the call.
void check_not_in_host_function(const char* call);

}  // namespace htp::detail
