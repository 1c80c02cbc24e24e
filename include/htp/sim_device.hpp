// The sim backend: a CPU emulation of a GPU behind the htp::device interface.
//
// It exists so that every line of htp's scheduling logic runs in CI on machines without a GPU, and
// as a laptop fallback. It is a test double, never the product.
//
// What it emulates:
//  - Device memory comes from the host (lazily committed), with a capacity limit standing in for
//    HBM, so out-of-memory paths are real. Pinned host memory is ordinary host memory, optionally
//    limited too.
//  - Every stream is a worker thread running its queue strictly in order. Two streams with no
//    event between them really run concurrently — the same ordering hazards as on a GPU.
//  - Events are completion flags with CUDA's semantics (record captures the queue so far; wait on
//    a never-recorded event is a no-op; re-recording replaces the capture).
//  - Optionally, a modelled link: host-to-device and device-to-host each move at most
//    `*_bytes_per_second`, copies in one direction share that link in order (as the copy engines
//    of a real GPU do), and every copy pays `copy_latency_ns` first. Device-to-device and
//    host-to-host copies run at memcpy speed.
//  - "Kernels" are host functions run on a stream (device::launch_host_func); a weight decode
//    (device::decode_weights_async) is the CPU reference decoder run on the stream's worker.
//  - Optionally, timing-only (sim_config::timing_only): the scale simulator. Device memory and
//    large pinned allocations only reserve address space (no RAM), copies move no bytes and take
//    their modelled time, checksums read 0 and fills do nothing, so a model far larger than this
//    machine's RAM runs with every scheduling decision made by the same code. See docs/sim.md.
#pragma once

#include <htp/device.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace htp {

/// Configuration of a sim device. Defaults: 4 GiB of "HBM", unlimited pinned memory, no modelled
/// link (copies run at memcpy speed).
struct sim_config {
  std::size_t device_memory_bytes = std::size_t{4} << 30;  ///< capacity of device memory.
  std::size_t pinned_memory_bytes = 0;     ///< capacity of pinned memory; 0 = no limit.
  std::uint64_t h2d_bytes_per_second = 0;  ///< modelled H2D link; 0 = unmodelled.
  std::uint64_t d2h_bytes_per_second = 0;  ///< modelled D2H link; 0 = unmodelled.
  std::uint64_t copy_latency_ns = 0;       ///< fixed cost of each modelled copy.
  int copy_engines = 2;                    ///< reported in device_properties.
  /// Fill freshly allocated device memory with this byte (0xA5 by default) so a read of memory
  /// nothing wrote shows up in checksums instead of reading zeros by luck. -1 leaves it as is.
  int poison_byte = 0xA5;
  /// Depth of every stream's queue: 0 = unlimited; N > 0 = a call that enqueues work on a stream
  /// already holding N unfinished tasks blocks until one finishes, as on a GPU whose stream queue
  /// is full. For tests of what htp enqueues while holding its locks.
  std::size_t stream_queue_limit = 0;
  /// Timing-only: no bytes are stored or moved (see the file comment). Device allocations and
  /// pinned ones of at least timing_only_real_below bytes reserve address space only (mmap
  /// PROT_NONE, MAP_NORESERVE: touching them faults, which finds any code that would read tensor
  /// bytes); smaller pinned allocations are real memory (htp's completion words live there).
  bool timing_only = false;
  std::size_t timing_only_real_below = std::size_t{1} << 20;
  /// Timing-only: the modelled rate of device::decode_weights_async, in bytes of decoded output
  /// per second. The default, 250 GB/s, is the low end of DietGPU's published A100 decode rates
  /// for float data (250-600 GB/s), unscaled: a conservative stand-in for a GPU decode kernel
  /// (docs/codec.md). Outside timing-only the sim runs the CPU reference decoder instead.
  std::uint64_t decode_bytes_per_second = 250'000'000'000;
  /// Reported in device_properties, so node topology code can be tested on sim.
  int ordinal = 0;
  std::string pci_bus_id;
  int numa_node = -1;
};

/// Creates a sim device. @throws htp::invalid_argument if device_memory_bytes is 0,
/// copy_engines < 1, decode_bytes_per_second is 0, or timing_only with timing_only_real_below
/// under 64 KiB.
std::unique_ptr<device> make_sim_device(const sim_config& config = {});

/// Bytes of pinned host memory the sim device `d` has allocated now (allocate(pinned_host, ...));
/// caller memory given to register_host_memory is not counted. For tests and benches that check
/// how much host memory htp itself holds. Thread-safe.
/// @throws htp::invalid_argument if `d` is not a sim device.
std::size_t sim_pinned_bytes_in_use(const device& d);

/// Threads blocked right now in a call that enqueues on a full stream queue of the sim device `d`
/// (sim_config::stream_queue_limit). For tests that must know a thread is stuck in an enqueue.
/// Thread-safe. @throws htp::invalid_argument if `d` is not a sim device.
std::size_t sim_blocked_enqueues(const device& d);

}  // namespace htp
