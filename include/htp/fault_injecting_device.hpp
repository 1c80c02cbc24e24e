// A device wrapper that makes chosen calls fail, for proving htp's failure paths
// (docs/reliability.md).
//
// Note [Fault injection]
// - `fault_injecting_device` wraps another device by reference and forwards every call to it.
//   Calls of the kinds in `fault_kind` are counted; a `fault_plan` picks which of them fail:
//   "the k-th call among the selected kinds" (a sweep runs k = 1, 2, ... until a run no longer
//   reaches k, so every call site fails once) or "each selected call with probability p" from a
//   seed (soak runs at 0.1 %, 1 %, 10 %).
// - A failing call does nothing on the wrapped device and throws what the real backend throws:
//   allocations htp::out_of_memory; everything else htp::cuda_error with code 999 and the name
//   `injected_fault` (not sticky), so a handler can tell an injected failure from a real one.
// - The wrapper also counts the bytes each memory kind has outstanding through it, so a test can
//   prove that everything allocated through it came back (no leak after a failure).
// - Thread safety: as htp::device; the plan and the counters are guarded by one mutex.
#pragma once

#include <htp/device.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <random>

namespace htp {

/// The calls a fault plan can make fail.
enum class fault_kind : unsigned {
  device_allocation = 0,  ///< allocate(memory_kind::device, ...)
  pinned_allocation,      ///< allocate(memory_kind::pinned_host, ...)
  copy,                   ///< copy_async
  event_record,           ///< record
  stream_wait,            ///< wait (on an event) and wait_value_async
  value_write,            ///< write_value_async
  create,                 ///< create_stream, create_event
  /// launch_host_func, checksum_async, fill_pattern_async, decode_weights_async,
  /// verify_checksum_async, launch_graph
  kernel,
};
/// Number of fault_kind values.
inline constexpr std::size_t fault_kind_count = 8;
/// Returns the kind's name, e.g. "copy".
const char* to_string(fault_kind k) noexcept;

/// A set of fault kinds, as a bit mask.
using fault_kind_mask = unsigned;
/// The mask holding only `k`.
constexpr fault_kind_mask mask_of(fault_kind k) noexcept { return 1u << static_cast<unsigned>(k); }
/// Every kind.
inline constexpr fault_kind_mask all_fault_kinds = (1u << fault_kind_count) - 1;

/// Which calls fail. The default plan fails nothing.
struct fault_plan {
  fault_kind_mask kinds = all_fault_kinds;  ///< the calls the plan counts and may fail.
  /// Fail the fail_at-th selected call (1-based, counted from set_plan). 0: none by number.
  std::uint64_t fail_at = 0;
  /// Fail each selected call with this probability (0 = never), independently of fail_at.
  double probability = 0;
  std::uint64_t seed = 0;  ///< seed of the probability draws.
  /// With fail_at: keep failing every selected call from the fail_at-th on (a persistent fault).
  bool persistent = false;
};

/// A device that forwards to `inner` and fails calls as its plan says. See Note [Fault injection].
class fault_injecting_device final : public device {
 public:
  /// Wraps `inner`, which must outlive this object. Starts with the empty plan (nothing fails).
  /// Never throws.
  explicit fault_injecting_device(device& inner);

  /// Replaces the plan and restarts its count of selected calls (not the per-kind counters).
  /// @throws htp::invalid_argument if probability is outside [0, 1].
  void set_plan(const fault_plan& plan);
  /// Stops injecting (the empty plan). Counters keep counting.
  /// Never throws.
  void disarm();
  /// Calls of kind `k` made so far (failed ones included), since construction or reset_counters.
  /// Never throws.
  std::uint64_t calls(fault_kind k) const;
  /// Failures injected into calls of kind `k` so far.
  /// Never throws.
  std::uint64_t injected(fault_kind k) const;
  /// Failures injected so far, all kinds.
  /// Never throws.
  std::uint64_t injected() const;
  /// Selected calls counted under the current plan (how far a sweep's k can go).
  /// Never throws.
  std::uint64_t selected_calls() const;
  /// Zeroes calls() and injected() (not the outstanding-bytes counts).
  /// Never throws.
  void reset_counters();
  /// Bytes of `kind` allocated through this wrapper and not yet deallocated.
  /// Never throws.
  std::size_t outstanding_bytes(memory_kind kind) const;
  /// The wrapped device.
  device& inner() noexcept { return inner_; }

  // ---- htp::device: each forwards to inner() unless the plan fails the call ----
  // @throws what device's member of the same name throws; an injected failure has the type a
  // real failure of that call would have (htp::cuda_error, htp::out_of_memory for allocations).
  const device_properties& properties() const noexcept override;
  memory_info memory() const override;
  void* allocate(memory_kind kind, std::size_t bytes) override;
  void deallocate(memory_kind kind, void* ptr, std::size_t bytes) override;
  void* mapped_device_pointer(void* pinned_host_ptr) const override;
  void register_host_memory(void* ptr, std::size_t bytes, bool read_only) override;
  void unregister_host_memory(void* ptr) override;
  stream_ref create_stream(stream_priority priority = stream_priority::normal) override;
  void destroy_stream(stream_ref s) noexcept override;
  void synchronize(stream_ref s) override;
  event_ref create_event() override;
  void destroy_event(event_ref e) noexcept override;
  void record(event_ref e, stream_ref s) override;
  void wait(event_ref e, stream_ref s) override;
  bool query(event_ref e) override;
  void synchronize(event_ref e) override;
  event_ref create_timed_event() override;
  std::optional<std::chrono::nanoseconds> elapsed(event_ref from, event_ref to) override;
  void copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                  stream_ref s) override;
  void launch_host_func(std::function<void()> fn, stream_ref s) override;
  void checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                      stream_ref s) override;
  void fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed, stream_ref s) override;
  using device::decode_weights_async;
  void decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                            std::size_t dst_bytes, std::uint32_t* status, stream_ref s) override;
  void write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) override;
  void wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) override;
  void write_value(std::uint32_t* word, std::uint32_t value) override;
  void verify_checksum_async(const void* ptr, std::size_t bytes, std::uint64_t expected,
                             std::uint32_t* counters, stream_ref s) override;
  void synchronize_all() override;
  // Capture control is forwarded and never failed (begin_capture, end_capture, destroy_graph,
  // is_capturing); a replay is a `kernel` call. Work queued while capturing is counted when it is
  // captured, not when it is replayed.
  void begin_capture(stream_ref s) override;
  graph_ref end_capture(stream_ref s) override;
  void launch_graph(graph_ref g, stream_ref s) override;
  void destroy_graph(graph_ref g) noexcept override;
  bool is_capturing(stream_ref s) override;

 private:
  /// Counts a call of kind `k` and throws the injected failure if the plan says so.
  void intercept(fault_kind k, const char* call, std::size_t bytes = 0);

  device& inner_;
  mutable std::mutex mutex_;
  fault_plan plan_;
  std::uint64_t selected_ = 0;
  std::mt19937_64 rng_;
  std::array<std::uint64_t, fault_kind_count> calls_{};
  std::array<std::uint64_t, fault_kind_count> injected_{};
  std::array<std::size_t, 2> outstanding_{};
};

}  // namespace htp
