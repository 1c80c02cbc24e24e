// The device interface: the only place htp touches a GPU runtime.
//
// Two implementations exist: `cuda` (the CUDA runtime, in cuda/) and `sim` (a CPU emulation of a
// GPU, in src/sim/, see sim_device.hpp). Everything above this layer — slab allocators, transfer
// engine, pager — is written against `htp::device` alone.
//
// Conventions, the same in every call:
//  - Argument order is (what, ..., stream): the stream a call is ordered on always comes last.
//  - Copies take (dst, src, bytes, direction, stream), like memcpy plus direction and stream.
//  - Memory is returned as raw pointers owned by the device object; every allocation must be
//    returned with deallocate(kind, ptr, bytes) naming the same kind and size. Allocations are
//    aligned to at least `device::alignment` (256) bytes.
//  - Streams and events are referred to by non-owning `stream_ref` / `event_ref` values. The
//    owning wrappers `htp::stream` and `htp::event` destroy them; a raw ref stays valid until then.
//  - Stream handles: a stream_ref must be one this device created and has not destroyed (on cuda
//    also one from htp::wrap_stream). The null ref, cudaStreamLegacy (1) and cudaStreamPerThread
//    (2) are refused by both backends with htp::invalid_argument before anything is queued. Any
//    other handle that is not a live stream is undefined on cuda (CUDA does not define the use of
//    a destroyed stream; the runtime may answer cudaErrorInvalidResourceHandle, thrown as
//    htp::cuda_error) and htp::invalid_argument on sim, which knows its streams.
//  - Memory ownership: "device memory" is memory of this device's GPU (on sim: an allocation of
//    this sim device, each sim device being its own GPU). "Pinned host memory" is pinned memory of
//    any device object (allocations are portable) or a range given to register_host_memory;
//    any other host memory is pageable.
//  - Thread safety: every member of `device` may be called from any host thread concurrently,
//    except that a stream or event must not be destroyed while another thread uses it.
//  - Capture and replay (begin_capture ... end_capture, launch_graph): a step program queued
//    once on capturing streams becomes a graph that each launch_graph replays with no host work;
//    CUDA's stream-capture rules apply on both backends (see "capture and replay" below).
//  - Host functions enqueued with launch_host_func must not call back into the device (CUDA forbids
//    runtime calls from stream callbacks); they may take locks, signal host threads and call
//    write_value and properties. Every other member called from one throws htp::logic_error on
//    both backends (see launch_host_func).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace htp {

/// Which implementation of the device interface (see make_device).
enum class backend {
  automatic,    ///< what HTP_BACKEND says (cuda, sim or auto); cuda when it is unset.
  cuda,         ///< the CUDA runtime; htp::cuda_error when it cannot run.
  sim,          ///< the CPU emulation (sim_device.hpp).
  cuda_or_sim,  ///< cuda when usable, otherwise sim with a warning logged (HTP_BACKEND=auto).
};

/// The two kinds of memory a device hands out.
enum class memory_kind {
  device,       ///< GPU memory (HBM); on sim, host memory standing in for it.
  pinned_host,  ///< page-locked host memory, mapped into the device's address space.
};

/// Direction of a copy, named as (source to destination).
enum class copy_direction { host_to_device, device_to_host, device_to_device, host_to_host };

/// Scheduling hint for a stream. `high` maps to the CUDA runtime's greatest priority.
enum class stream_priority { normal, high };

/// Returns "cuda", "sim", "cuda_or_sim" or "automatic".
const char* to_string(backend b) noexcept;
/// Returns "device" or "pinned_host".
const char* to_string(memory_kind k) noexcept;
/// Returns "H2D", "D2H", "D2D" or "H2H".
const char* to_string(copy_direction d) noexcept;

/// Non-owning reference to a stream created by a device. Default-constructed refs are null.
struct stream_ref {
  void* native = nullptr;  ///< cudaStream_t on cuda; the sim stream object on sim.
  explicit operator bool() const noexcept { return native != nullptr; }
  friend bool operator==(stream_ref a, stream_ref b) noexcept { return a.native == b.native; }
  friend bool operator!=(stream_ref a, stream_ref b) noexcept { return a.native != b.native; }
};

/// Non-owning reference to an event created by a device.
struct event_ref {
  void* native = nullptr;  ///< cudaEvent_t on cuda; the sim event object on sim.
  explicit operator bool() const noexcept { return native != nullptr; }
  friend bool operator==(event_ref a, event_ref b) noexcept { return a.native == b.native; }
  friend bool operator!=(event_ref a, event_ref b) noexcept { return a.native != b.native; }
};

/// Non-owning reference to an executable graph made by device::end_capture.
struct graph_ref {
  void* native = nullptr;  ///< cudaGraphExec_t on cuda; the sim graph object on sim.
  explicit operator bool() const noexcept { return native != nullptr; }
  friend bool operator==(graph_ref a, graph_ref b) noexcept { return a.native == b.native; }
  friend bool operator!=(graph_ref a, graph_ref b) noexcept { return a.native != b.native; }
};

/// Facts about the device, fixed for its lifetime.
struct device_properties {
  backend kind = backend::sim;
  int ordinal = 0;
  std::string name;              ///< e.g. "NVIDIA H200" or "htp sim device".
  std::size_t total_memory = 0;  ///< bytes of device memory.
  int copy_engines = 1;          ///< asynchronous copy engines (cudaDeviceProp::asyncEngineCount).
  int compute_capability_major = 0;  ///< 0 on sim.
  int compute_capability_minor = 0;
  bool can_map_host_memory = true;  ///< pinned host memory has a device address (zero-copy).
  /// PCI address, lower case ("0000:3b:00.0"; cudaDeviceGetPCIBusId), for topology discovery.
  /// Empty on sim unless configured.
  std::string pci_bus_id;
  /// The host NUMA node nearest the device (sysfs numa_node of its PCI device); -1 = unknown.
  int numa_node = -1;
  /// A timing-only sim device (sim_config::timing_only): its memory holds no bytes, copies move
  /// none (they only take their modelled time), checksums read 0. Code above the device skips
  /// what would touch tensor bytes on the host (register sources, copy_to_host refuses). Always
  /// false on cuda.
  bool timing_only = false;
};

/// Free and total device memory, as cudaMemGetInfo reports them.
struct memory_info {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// The device interface. See the file comment for the conventions every member follows.
class device {
 public:
  /// Alignment in bytes of every allocation a device returns.
  static constexpr std::size_t alignment = 256;

  virtual ~device() = default;
  device() = default;
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  /// Facts about the device. Thread-safe, no stream order.
  virtual const device_properties& properties() const noexcept = 0;
  /// Free and total device memory now. Thread-safe.
  /// @throws htp::cuda_error if the CUDA runtime fails (sim: never).
  virtual memory_info memory() const = 0;

  // ---- memory --------------------------------------------------------------------------------
  /// Allocates `bytes` of `kind`, aligned to `alignment`. Synchronous and slow on real hardware
  /// (cudaMalloc may synchronize the device; pinning host pages costs ~0.1-1 s/GiB), so call it
  /// at set-up, not on a request path.
  /// @throws htp::invalid_argument if bytes == 0; htp::out_of_memory if the memory is not there.
  virtual void* allocate(memory_kind kind, std::size_t bytes) = 0;
  /// Returns memory from allocate(kind, bytes). The caller guarantees no queued work still uses
  /// it (synchronize first). @throws htp::invalid_argument if `ptr` was not returned by
  /// allocate with this kind, or `bytes` differs from the allocated size; nothing is freed then.
  virtual void deallocate(memory_kind kind, void* ptr, std::size_t bytes) = 0;
  /// Device-side address of pinned host memory (zero-copy access from kernels). On sim it is the
  /// host address itself. @throws htp::invalid_argument if ptr is not inside a pinned allocation.
  virtual void* mapped_device_pointer(void* pinned_host_ptr) const = 0;
  /// Makes caller-owned host memory [ptr, ptr + bytes) usable as the host side of asynchronous
  /// copies and of zero-copy access: page-locks it and maps it for every device
  /// (cudaHostRegister with cudaHostRegisterPortable | cudaHostRegisterMapped, plus
  /// cudaHostRegisterReadOnly when `read_only`, which a read-only mmap of a file needs; the device
  /// then never writes it). On sim the range is only recorded. The memory stays the caller's: it
  /// must outlive the registration and is never freed by the device. Slow (like pinning), so call
  /// it at set-up. Thread-safe.
  /// @throws htp::invalid_argument for a null pointer, zero bytes, or a range overlapping one
  /// already registered; htp::cuda_error if the driver refuses (the message says why).
  virtual void register_host_memory(void* ptr, std::size_t bytes, bool read_only) = 0;
  /// Undoes register_host_memory(ptr, ...). The caller guarantees no queued work still uses it.
  /// @throws htp::invalid_argument if `ptr` is not the start of a registered range.
  virtual void unregister_host_memory(void* ptr) = 0;

  // ---- streams -------------------------------------------------------------------------------
  /// Creates a stream that runs its work in order and concurrently with other streams.
  /// @throws htp::cuda_error if the runtime cannot create it (sim: never).
  virtual stream_ref create_stream(stream_priority priority = stream_priority::normal) = 0;
  /// Waits for the stream's queued work, then destroys it. Never throws.
  virtual void destroy_stream(stream_ref s) noexcept = 0;
  /// Blocks the calling host thread until all work queued on `s` so far has completed.
  /// @throws htp::cuda_error (or htp::logic_error on sim) if that work failed; htp::logic_error
  /// if `s` is capturing (the capture is invalidated; see "capture and replay").
  virtual void synchronize(stream_ref s) = 0;

  // ---- events --------------------------------------------------------------------------------
  /// Creates an event (timing disabled, as cudaEventDisableTiming). A never-recorded event counts
  /// as complete: it captures no work (CUDA: "before the first call to cudaEventRecord, an event
  /// represents an empty set of work"), so query is true, synchronize returns at once and wait is
  /// a no-op. Thread-safe.
  /// @throws htp::cuda_error if the runtime cannot create it (sim: never).
  virtual event_ref create_event() = 0;
  /// Destroys an event. Work already queued that waits on it still sees its recorded state.
  virtual void destroy_event(event_ref e) noexcept = 0;
  /// Captures the work queued on `s` so far into `e`; `e` completes when that work has. Recording
  /// again replaces the previous capture, as cudaEventRecord does; waits already queued keep the
  /// capture they saw. Stream-ordered on `s`; thread-safe (two threads recording one event race
  /// for which capture it ends with).
  /// @throws htp::invalid_argument for a stream htp cannot use (null, legacy) or, on sim, one not
  /// of this device; htp::cuda_error if the runtime fails.
  virtual void record(event_ref e, stream_ref s) = 0;
  /// Makes all work queued on `s` after this call wait until the capture `e` holds now completes.
  /// Does not block the host. Waiting on a never-recorded event is a no-op.
  /// @throws htp::invalid_argument for a stream htp cannot use (null, legacy) or, on sim, one not
  /// of this device; htp::cuda_error if the runtime fails.
  virtual void wait(event_ref e, stream_ref s) = 0;
  /// True when the work captured in `e` has completed. Never blocks.
  /// @throws htp::cuda_error (or htp::logic_error on sim) if the captured work failed;
  /// htp::logic_error if `e` was last recorded in an active stream capture (see "capture and
  /// replay"; sim: an event recorded in a capture that has ended counts as never recorded).
  virtual bool query(event_ref e) = 0;
  /// Blocks the calling host thread until the work captured in `e` has completed.
  /// @throws htp::cuda_error (or htp::logic_error on sim) if the captured work failed;
  /// htp::logic_error if `e` was last recorded in an active stream capture.
  virtual void synchronize(event_ref e) = 0;
  /// Creates an event the device times (cuda: timing enabled, a little dearer to record than
  /// create_event's), for elapsed(). Destroy it with destroy_event. Otherwise as create_event.
  virtual event_ref create_timed_event() = 0;
  /// Device time from the completion of `from` to that of `to`, two events made by this device's
  /// create_timed_event. nullopt while either has not completed, and for an event never recorded
  /// (CUDA answers cudaErrorNotReady for the first and cudaErrorInvalidResourceHandle for the
  /// second; the cuda backend maps both, the sim gives the same answers). Never blocks.
  /// Thread-safe as query is; not stream-ordered (it reads the captures' state now). On sim it is
  /// the modelled device time (copies at the modelled link rate, host functions as they ran).
  /// @throws htp::invalid_argument on both backends for an event not made by create_timed_event
  /// of this device, or destroyed (CUDA answers cudaErrorInvalidResourceHandle for an event made
  /// with timing disabled; htp keeps the set of timed events to tell it from "never recorded");
  /// htp::cuda_error (or htp::logic_error on sim) if captured work failed (cuda: a sticky error).
  virtual std::optional<std::chrono::nanoseconds> elapsed(event_ref from, event_ref to) = 0;

  // ---- work ----------------------------------------------------------------------------------
  /// Queues a copy of `bytes` from `src` to `dst` on `s`. Both ranges must stay valid until the
  /// copy completes (record an event after it). `direction` names the memory on each side: a
  /// device side must be device memory of this device (see the file comment), a host side any
  /// host memory. Stream-ordered on `s`; thread-safe.
  ///
  /// Pageable host memory is allowed, but such a copy is synchronous with respect to the host:
  /// CUDA stages it through pinned buffers, so cudaMemcpyAsync may return only once the stream
  /// has reached the copy and the bytes have moved ("API synchronization behavior" of the CUDA
  /// runtime: "might be synchronous with respect to host"), and the sim always returns only then.
  /// So never issue one on a stream that is held (a host function waiting on a gate, or a
  /// wait_value_async not yet satisfied) by the thread that would release it: it deadlocks on
  /// both backends. A copy between pinned memory and the device does not block.
  /// @throws htp::invalid_argument if a pointer is null, bytes == 0, or the ranges overlap; on sim
  /// also for a device side that is not inside one device allocation of this device, or a host
  /// side that is device memory (cuda: a pointer not matching `direction` is undefined, as
  /// cudaMemcpyAsync documents), and on both backends for a pageable host side while `s` is
  /// capturing (see "capture and replay"); htp::cuda_error if the runtime refuses
  /// (cudaErrorInvalidValue).
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                          stream_ref s) = 0;
  /// Queues `fn` to run on a host thread once all earlier work on `s` has completed; later work
  /// on `s` waits for it to return. Stream-ordered on `s`; thread-safe.
  ///
  /// `fn` must not call into the device: CUDA's host functions "must not make any CUDA API
  /// calls" (cudaLaunchHostFunc; one that does may get cudaErrorNotPermitted, or deadlock when the
  /// call waits on the callback's own stream). Both backends mark the thread while `fn` runs, and
  /// every member but properties() and write_value() (a host store, allowed) called from `fn`
  /// throws htp::logic_error naming the call, before the runtime is reached; destroy_stream and
  /// destroy_event cannot throw and must simply not be called from `fn`. `fn` should not throw:
  /// on sim a throw becomes a sticky htp::logic_error reported by the next synchronize, on cuda it
  /// is swallowed (it cannot cross the runtime's callback thread). `fn` must not wait on work not
  /// queued before it (CUDA: host functions without a mandated order may be serialized).
  /// @throws htp::invalid_argument for an empty `fn`; htp::cuda_error if the runtime fails.
  virtual void launch_host_func(std::function<void()> fn, stream_ref s) = 0;
  /// Queues a computation of htp::checksum over `bytes` of device memory at `ptr` (a kernel on
  /// cuda); the result is written to `*result`, which must be pinned host memory from this device
  /// and is valid once the work completes (synchronize or an event).
  /// @throws htp::invalid_argument on a null pointer or zero bytes.
  virtual void checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                              stream_ref s) = 0;
  /// Queues filling `bytes` of device memory at `ptr` with htp::fill_pattern(seed) (a kernel on
  /// cuda), so tests and benchmarks make payloads in place. @throws htp::invalid_argument on a null
  /// pointer or zero bytes.
  virtual void fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed,
                                  stream_ref s) = 0;
  /// Queues decoding a coded weight frame (htp::encode_weights, codec.hpp) of `wire_bytes` at
  /// `wire` into `dst_bytes` at `dst`; both are device memory of this device (copy the frame in
  /// first) and must stay valid until the work completes. `dst_bytes` must equal the frame's
  /// decoded size. A kernel on cuda (one thread per codec block, the frame's tables read from
  /// device memory); on sim the CPU reference decoder on the stream's worker, or, on a
  /// timing-only sim, no bytes and dst_bytes / sim_config::decode_bytes_per_second of modelled
  /// time. A corrupt frame never makes the decode read or write outside the two ranges.
  ///
  /// `status` (null, or a 32-bit word of pinned host memory of this device, as write_value_async's
  /// words) asks for a verified decode: the work first checks the header, its check word and
  /// every chunk's checksum (on cuda a verify kernel ahead of the decode, the checksums reduced in
  /// parallel on the GPU), then decodes, and stores 0 at `*status` when the frame is intact or a
  /// nonzero htp::codec::status (include/htp/detail/codec_format.hpp: which check failed) when it
  /// is not. It is there once the stream passes this point (synchronize or an event). A corrupt
  /// frame then never fails the stream, and the destination bytes are undefined. On a timing-only
  /// sim it stores 0. Without `status` nothing is verified: on sim a corrupt frame fails the
  /// stream's work (the next synchronize throws htp::logic_error quoting the htp::corrupt_data, a
  /// sticky error), on cuda the destination bytes are undefined.
  /// @throws htp::invalid_argument on a null pointer, zero bytes, or (sim) a status word outside
  /// this device's pinned memory; (cuda) htp::invalid_argument for a status word that is not
  /// mapped pinned memory, htp::cuda_error if the launch fails.
  virtual void decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                                    std::size_t dst_bytes, std::uint32_t* status, stream_ref s) = 0;
  /// decode_weights_async without a status word: unverified (see above).
  void decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                            std::size_t dst_bytes, stream_ref s) {
    decode_weights_async(wire, wire_bytes, dst, dst_bytes, nullptr, s);
  }
  // ---- stream memory operations -----------------------------------------------------------
  // A 32-bit word of pinned host memory (from allocate(pinned_host, ...)) that streams write and
  // wait on, so a stream can depend on work that has not been issued yet (an event cannot: waiting
  // on an event recorded later is a no-op). The transfer engine uses this to order the compute
  // stream behind a copy the token bucket has not released yet. Comparisons are wrap-safe:
  // "reached" means (int32_t)(*word - value) >= 0.
  /// Queues a write of `value` to `*word` on `s` (cuStreamWriteValue32 on cuda).
  /// @throws htp::invalid_argument (sim) for a word outside this device's pinned memory;
  /// htp::cuda_error if the driver fails.
  virtual void write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) = 0;
  /// Makes later work on `s` wait until `*word` has reached `value` (cuStreamWaitValue32 on cuda).
  /// Does not block the host. The word must be written by a stream or by write_value.
  /// @throws htp::invalid_argument (sim) for a word outside this device's pinned memory;
  /// htp::cuda_error if the driver fails.
  virtual void wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) = 0;
  /// Stores `value` into `*word` from the host now, waking streams that wait on it. Thread-safe.
  /// Never throws (a host store).
  virtual void write_value(std::uint32_t* word, std::uint32_t value) = 0;

  /// Queues a kernel that computes htp::checksum over `bytes` of device memory at `ptr`, compares
  /// it with `expected`, and adds 1 to counters[0] and, on a mismatch, 1 to counters[1].
  /// `counters` is two 32-bit words of pinned host memory of this device (as write_value_async's
  /// words); the sums are there once the stream passes this point. Capturable: no host callback,
  /// no allocation, so a captured step verifies its payloads on every replay. Verifies that update
  /// one `counters` pair must be ordered with each other (one stream, or events): on cuda the
  /// last block adds with a plain read-modify-write of the mapped words (atomics on mapped memory
  /// are not guaranteed over PCIe), so unordered verifies may lose counts (the sim adds
  /// atomically). On a timing-only sim it adds to counters[0] only (there are no bytes to sum).
  /// Stream-ordered on `s`; thread-safe.
  /// @throws htp::invalid_argument on a null pointer or zero bytes, or counters outside pinned
  /// host memory of this device (cuda: not mapped pinned memory); htp::cuda_error if the launch
  /// fails.
  virtual void verify_checksum_async(const void* ptr, std::size_t bytes, std::uint64_t expected,
                                     std::uint32_t* counters, stream_ref s) = 0;

  /// Blocks until all work on every stream of this device has completed.
  /// @throws htp::cuda_error (or htp::logic_error on sim) if any of that work failed;
  /// htp::logic_error while a stream of this device is capturing (CUDA: "invalid to synchronize
  /// a broader handle which encompasses an active stream capture"; the sim also invalidates that
  /// capture).
  virtual void synchronize_all() = 0;

  // ---- capture and replay ------------------------------------------------------------------
  // A step program (copies, event records and waits, kernels, value words) is captured once from
  // the calls that would queue it and replayed with one call per step and no other host work:
  // cudaStreamBeginCapture / cudaStreamEndCapture / cudaGraphInstantiate / cudaGraphLaunch on
  // cuda, the sim's graph (docs/sim.md, "Capture and replay") on sim. The rules are CUDA's
  // (CUDA Programming Guide, "Creating a Graph Using Stream Capture"), kept alike on both backends:
  //  - Capturing streams: `s` from begin_capture (the origin), and every stream that waits on an
  //    event recorded on a capturing stream of the capture after it began (it joins: a fork).
  //    Work queued on a capturing stream is recorded, not run; it runs on each launch_graph.
  //    Work queued on `s` before begin_capture is not part of the graph.
  //  - Joining back: before end_capture every joined stream must be joined to the origin (the
  //    origin waits on an event recorded on it after its last captured work).
  //  - Refused while capturing, each with htp::logic_error, invalidating the capture (CUDA: "when
  //    an invalid operation is attempted during stream capture, any associated capture graphs are
  //    invalidated"; further work on its streams is refused with htp::logic_error until
  //    end_capture, which then throws htp::logic_error and ends the capture): synchronize of a
  //    capturing stream (CUDA cudaErrorStreamCaptureUnsupported); query or synchronize of an event
  //    recorded in an active capture (cudaErrorCapturedEvent); a wait on a capturing stream for an
  //    event recorded outside the capture (cudaErrorStreamCaptureIsolation: CUDA needs
  //    cudaEventWaitExternal, which htp does not use) or in another capture
  //    (cudaErrorStreamCaptureMerge); synchronize_all while any stream captures; allocate,
  //    deallocate, register_host_memory and unregister_host_memory from the thread that began a
  //    capture still active (cudaStreamCaptureModeThreadLocal: "potentially unsafe API calls",
  //    cudaErrorStreamCaptureUnsupported). The cuda backend maps CUDA's stream-capture errors
  //    (cudaErrorStreamCaptureUnsupported ... cudaErrorStreamCaptureWrongThread) to
  //    htp::logic_error wherever they come from.
  //  - htp's own rule, checked before anything is queued (the capture stays valid): a copy whose
  //    host side is pageable is refused on a capturing stream with htp::invalid_argument on both
  //    backends. (CUDA captures it, but a replay reads the pageable memory with no host
  //    synchronisation at all, so the copy's host-synchronous contract cannot hold.)
  //  - Host functions (launch_host_func) may be captured: they run on each replay.
  // A graph's pointers and sizes are fixed at capture: every replay reads and writes the same
  // memory, which must stay valid while the graph exists.

  /// Begins capturing work queued on `s` (cudaStreamBeginCapture,
  /// cudaStreamCaptureModeThreadLocal). Until end_capture(s), work queued on `s`, and on any stream
  /// that joins (see above), is recorded, not run. Does not wait for work queued on `s` before.
  /// Thread-safe; end_capture must come from the same host thread (CUDA:
  /// cudaErrorStreamCaptureWrongThread).
  /// @throws htp::logic_error if `s` is capturing already (nesting; cudaErrorIllegalState on
  /// cuda; the sim leaves the capture as it was) or from a host function; htp::invalid_argument for
  /// a stream htp cannot use; htp::cuda_error if the runtime fails otherwise.
  virtual void begin_capture(stream_ref s) = 0;
  /// Ends the capture begun on `s` and instantiates it (cudaStreamEndCapture, cudaGraphInstantiate
  /// with flags 0; the intermediate cudaGraph_t is destroyed). Every capturing stream of the
  /// capture leaves capture mode, whatever the outcome. Destroy the result with destroy_graph.
  /// @throws htp::logic_error, after ending the capture (nothing leaks, every stream usable), if a
  /// joined stream was not joined back ("unjoined"; CUDA answers cudaErrorStreamCaptureUnjoined)
  /// or the capture was invalidated (cudaErrorStreamCaptureInvalidated); htp::logic_error, leaving
  /// the capture as it is, if `s` is not the origin of an active capture (cudaErrorIllegalState,
  /// or cudaErrorStreamCaptureUnmatched for a joined stream) or this is not the thread that began
  /// it (cudaErrorStreamCaptureWrongThread); htp::cuda_error if instantiation fails.
  virtual graph_ref end_capture(stream_ref s) = 0;
  /// Queues one replay of `g` on `s` (cudaGraphLaunch): all its work runs after the work queued on
  /// `s` so far, and later work on `s` waits for all of it. Replays of one graph never overlap:
  /// each runs after the previous one queued on any stream has finished (as cudaGraphLaunch
  /// orders them). Independent branches of the graph (a copy stream forked from the origin) run
  /// concurrently, as they did when captured. Stream-ordered on `s`; thread-safe. Queues nothing
  /// on the host: no host function, no allocation.
  /// @throws htp::invalid_argument for a null or destroyed graph (sim; undefined on cuda) or a
  /// stream htp cannot use; htp::logic_error if `s` is capturing (a graph launched into a capture
  /// is not supported by htp); htp::cuda_error if the launch fails.
  virtual void launch_graph(graph_ref g, stream_ref s) = 0;
  /// Destroys the graph. On sim it first waits for its queued replays to complete (so it must not
  /// be called while a replay waits on something the calling thread would do); on cuda
  /// cudaGraphExecDestroy (an in-flight replay completes, then is freed). A null ref is a no-op.
  /// Must not race with launch_graph of the same graph. Never throws.
  virtual void destroy_graph(graph_ref g) noexcept = 0;
  /// True while `s` is capturing (cudaStreamIsCapturing: active or invalidated), as the origin or
  /// as a joined stream. Thread-safe.
  /// @throws htp::invalid_argument for a stream htp cannot use; htp::cuda_error if the runtime
  /// fails.
  virtual bool is_capturing(stream_ref s) = 0;
};

/// Owning stream: destroys the stream (after its queued work) on destruction. Movable.
class stream {
 public:
  stream() = default;
  /// Creates a stream on `dev`, which must outlive this object.
  /// @throws as device::create_stream.
  explicit stream(device& dev, stream_priority priority = stream_priority::normal);
  /// Never throws (a failure of the stream's work is for synchronize to report).
  ~stream();
  stream(stream&& other) noexcept;
  stream& operator=(stream&& other) noexcept;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  stream_ref ref() const noexcept { return ref_; }
  operator stream_ref() const noexcept { return ref_; }  // NOLINT: a stream is usable as a ref
  /// Blocks until the stream's queued work has completed.
  /// @throws as device::synchronize of the stream.
  void synchronize() const;

 private:
  device* dev_ = nullptr;
  stream_ref ref_{};
};

/// Owning event: destroys the event on destruction. Movable.
class event {
 public:
  event() = default;
  /// Creates an event on `dev`, which must outlive this object.
  /// @throws as device::create_event.
  explicit event(device& dev);
  /// Never throws.
  ~event();
  event(event&& other) noexcept;
  event& operator=(event&& other) noexcept;
  event(const event&) = delete;
  event& operator=(const event&) = delete;

  event_ref ref() const noexcept { return ref_; }
  operator event_ref() const noexcept { return ref_; }  // NOLINT: an event is usable as a ref
  /// record(*this, s) on the owning device.
  void record(stream_ref s) const;
  /// True when the captured work has completed.
  /// @throws as device::query.
  bool query() const;
  /// Blocks until the captured work has completed.
  /// @throws as device::synchronize of the event.
  void synchronize() const;

 private:
  device* dev_ = nullptr;
  event_ref ref_{};
};

/// Owning executable graph: destroys it (device::destroy_graph) on destruction. Movable.
class graph {
 public:
  graph() = default;
  /// Takes ownership of `g`, made by `dev.end_capture`; `dev` must outlive this object.
  graph(device& dev, graph_ref g) noexcept : dev_(&dev), ref_(g) {}
  /// Ends the capture begun on `s` and owns the result: graph(dev, dev.end_capture(s)).
  /// @throws as device::end_capture.
  static graph end_capture(device& dev, stream_ref s);
  /// Never throws.
  ~graph();
  graph(graph&& other) noexcept;
  graph& operator=(graph&& other) noexcept;
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;

  graph_ref ref() const noexcept { return ref_; }
  operator graph_ref() const noexcept { return ref_; }  // NOLINT: a graph is usable as a ref
  explicit operator bool() const noexcept { return static_cast<bool>(ref_); }
  /// device::launch_graph(*this, s) on the owning device.
  /// @throws as device::launch_graph; htp::logic_error on an empty htp::graph.
  void launch(stream_ref s) const;

 private:
  device* dev_ = nullptr;
  graph_ref ref_{};
};

/// Creates a device. The backend is never chosen silently:
///  - `cuda`: the CUDA runtime on GPU `ordinal`. If it cannot run (no GPU, no driver or one too old
///    for htp's CUDA 13 runtime, htp built without CUDA) this throws htp::cuda_error with the
///    reason and the remedy (e.g. the driver version needed); there is no fallback.
///  - `sim`: the CPU emulation with default sim_config (ordinal ignored).
///  - `cuda_or_sim`: cuda when usable, otherwise sim, logging a warning that says why.
///  - `automatic`: the HTP_BACKEND environment variable decides: "cuda" (also when unset or
///    empty), "sim" or "auto" (= cuda_or_sim).
/// The choice is logged at info level ("htp" logger, log.hpp). Thread-safe. On cuda the caller's
/// current device is left as it was (see cuda_interop.hpp).
/// @throws htp::cuda_error as above; htp::invalid_argument for an ordinal that does not exist or
/// an HTP_BACKEND value that is none of the three.
std::unique_ptr<device> make_device(backend which = backend::automatic, int ordinal = 0);

/// The backend `automatic` stands for now: from HTP_BACKEND (cuda when unset; "auto" gives
/// cuda_or_sim). @throws htp::invalid_argument for any other value. Thread-safe.
backend backend_from_environment();

/// Number of CUDA devices visible, 0 when htp was built without CUDA or no driver is present.
/// `why`, if given, receives a sentence saying why there is none. Thread-safe.
int cuda_device_count(std::string* why = nullptr) noexcept;

}  // namespace htp
