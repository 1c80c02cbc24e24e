// The transfer engine: moves bytes between host and HBM predictably, on top of htp::device.
//
// Note [Transfer engine]
// - Two streams owned by the engine: `prefetch` carries host-to-device copies, `reduction` carries
//   device-to-host write-backs and device-to-device (compaction) copies. The caller's compute
//   stream is the third; it waits on the engine through wait_on(), never on the host.
// - A request is split into chunks (config.chunk_bytes, 2 MiB by default). A dispatcher thread per
//   stream issues one chunk at a time: the highest-priority queued request first (fault, prefetch,
//   write-back, compaction; within a class by deadline, see below), only after the chunk's bytes
//   were taken from the direction's token bucket, and only while fewer than
//   config.max_in_flight_chunks chunks are outstanding on that stream. Copy engines serve copies in
//   order whatever the stream priority, so this bound is what lets an urgent fault overtake a long
//   prefetch: it waits for at most the chunks already in flight.
// - Completion without the host: each request owns a 32-bit word of pinned memory and a generation
//   number. The dispatcher queues write_value_async(word, generation) behind the request's last
//   chunk; wait_on() queues wait_value_async(word, generation) on the compute stream, which works
//   even before the last chunk has been issued. A cancelled or failed request has its word written
//   from the host so no stream waits forever.
// - Deadlines: within a class, a request issues by key = min(need time, submission +
//   max_deadline_wait), earliest first (set_need_time; without one, key = submission +
//   max_deadline_wait, so equal waits mean first come, first served). An imminent prefetch
//   overtakes a distant one, and none starves: it waits at most for the requests submitted before
//   its key. Faults ignore need times. Queue operations are O(log n).
// See docs/transfer_engine.md for the design note and measured numbers.
#pragma once

#include <htp/codec.hpp>
#include <htp/device.hpp>
#include <htp/latency_histogram.hpp>
#include <htp/tensor_source.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace htp {

class shared_link;  // shared_link.hpp
class tensor_file;  // tensor_file.hpp

/// Priority classes, highest first.
enum class transfer_priority : int { fault = 0, prefetch = 1, writeback = 2, compaction = 3 };
inline constexpr std::size_t transfer_priority_count = 4;
/// Returns "fault", "prefetch", "writeback" or "compaction".
const char* to_string(transfer_priority p) noexcept;

/// A range of memory the engine may write into. Non-owning.
struct memory_region {
  void* ptr = nullptr;
  std::size_t bytes = 0;
};

/// Rate limits of one host link direction (H2D or D2H).
struct transfer_link_config {
  /// The cap in bytes per second. Unset: config.default_cap_fraction (80%) of the link peak.
  /// An explicit value (e.g. 1'000'000'000 for 1 GB/s) overrides it; 0 is invalid.
  std::optional<std::uint64_t> rate_bytes_per_second;
  /// The link's peak in bytes per second. Unset: measured at construction by a short calibration;
  /// setting it skips the calibration for this direction.
  std::optional<std::uint64_t> link_bytes_per_second;
  /// No cap at all (the bucket lets every chunk through at once).
  bool unlimited = false;
  /// Burst in bytes; 0 means two chunks. Must hold at least one chunk.
  std::uint64_t burst_bytes = 0;
  /// A link shared with other GPUs' engines upstream of this cap (a PCIe switch, a NUMA node's
  /// memory bandwidth; see shared_link.hpp): a chunk also needs its tokens. Null: none. Its burst
  /// must hold one chunk.
  std::shared_ptr<shared_link> upstream;
};

/// What the dispatcher reports as it issues each chunk (test hook, tracing).
struct transfer_chunk_info {
  std::uint64_t request_id = 0;
  std::size_t chunk_index = 0;
  std::size_t chunk_count = 0;
  std::size_t bytes = 0;
  transfer_priority priority = transfer_priority::prefetch;
  copy_direction direction = copy_direction::host_to_device;
};

/// Configuration of a transfer engine.
struct transfer_config {
  std::size_t chunk_bytes = std::size_t{2} << 20;  ///< chunk size; > 0.
  std::size_t max_in_flight_chunks = 3;            ///< per stream; >= 1.
  transfer_link_config h2d;                        ///< host-to-device limits.
  transfer_link_config d2h;                        ///< device-to-host limits.
  double default_cap_fraction = 0.8;               ///< cap = fraction x link peak; in (0, 1].
  std::size_t calibration_bytes = std::size_t{32} << 20;  ///< size of each calibration copy.
  int calibration_repeats = 3;  ///< timed copies per direction (after a warm-up).
  /// Device memory (HBM) that H2D and D2D copies may write into. A destination outside every
  /// region is rejected.
  std::vector<memory_region> device_memory;
  /// Host memory that D2H copies may write into.
  std::vector<memory_region> host_memory;
  /// The longest a request's need time may let later requests overtake it (Note [Deadline
  /// order] in src/transfer/deadline_queue.hpp): its issue key is min(need, submission + this).
  /// > 0. Also the key of a request without a need time, relative to its submission.
  std::chrono::nanoseconds max_deadline_wait = std::chrono::milliseconds(100);
  /// Called on a dispatcher thread, under the engine's lock, as each chunk is issued. Must be
  /// quick and must not call into the engine. Empty: nothing is called.
  std::function<void(const transfer_chunk_info&)> on_chunk_issued;
  /// Finished requests whose status and latency stay queryable; older ones report `expired`.
  std::size_t history = 65536;
  /// Keep a queue of finished requests for take_finished(), so an owner learns of completions in
  /// O(finished) instead of asking about everything in flight. Off: nothing is kept.
  bool finished_queue = false;
  /// Verify page-ins on the device: each piece of a decode request is decoded with a status word
  /// (device::decode_weights_async: header, check word and chunk checksums checked first), and
  /// each chunk of a submit_from_file request given chunk checksums is checksummed in HBM after
  /// its copy (device::checksum_async, on a verify stream of its own, so copies stay back to
  /// back). A mismatch fails the request with htp::corrupt_data naming the file (or the host
  /// copy), the offset and the chunk; the device and every other request go on. Off: no check
  /// (a corrupt decode piece then fails the decode stream for good on sim, and is undefined bytes
  /// on cuda). Timing-only devices hold no bytes: nothing is checked there.
  bool verify_page_ins = true;
};

/// A request's handle: a value, never reused by one engine. Default-constructed tickets are null.
struct transfer_ticket {
  std::uint64_t id = 0;
  explicit operator bool() const noexcept { return id != 0; }
  friend bool operator==(transfer_ticket a, transfer_ticket b) noexcept { return a.id == b.id; }
  friend bool operator!=(transfer_ticket a, transfer_ticket b) noexcept { return a.id != b.id; }
};

enum class transfer_status {
  queued,     ///< no chunk issued yet; cancellable.
  in_flight,  ///< some chunks issued, not all complete.
  complete,   ///< every byte has arrived.
  cancelled,  ///< cancelled before any chunk was issued; nothing was copied.
  failed,     ///< the device rejected a chunk; wait() rethrows the reason.
  expired,    ///< finished long ago; its record left the history.
};
const char* to_string(transfer_status s) noexcept;

/// A request as it finished, from transfer_engine::take_finished(): its outcome travels with it,
/// so an owner never has to query a status that may have left the history meanwhile.
struct finished_transfer {
  transfer_ticket ticket;
  transfer_status status = transfer_status::complete;  ///< complete, cancelled or failed
  std::chrono::nanoseconds latency{0};                 ///< submission to completion
  /// failed: the typed cause wait() would rethrow (htp::io_error of a file read, htp::corrupt_data
  /// of a failed verification); null for a device error, and when not failed.
  std::exception_ptr error;
};

/// Counters of one copy direction.
struct transfer_direction_metrics {
  std::uint64_t bytes = 0;          ///< bytes whose chunks have completed.
  std::uint64_t chunks = 0;         ///< chunks completed.
  std::uint64_t busy_ns = 0;        ///< time with at least one chunk in flight.
  double achieved_gbps = 0;         ///< bytes / busy time, in GB/s (1e9 bytes/s).
  double utilization = 0;           ///< achieved / link peak (0 when the peak is unknown).
  std::uint64_t token_wait_ns = 0;  ///< time the dispatcher waited for tokens.
  std::uint64_t rate_cap_bytes_per_second = 0;   ///< current cap; 0 when unlimited or not limited.
  std::uint64_t link_peak_bytes_per_second = 0;  ///< calibrated or configured link peak.
  /// The rate this direction runs at: its cap, or the link peak when it is not capped.
  std::uint64_t effective_rate() const noexcept {
    return rate_cap_bytes_per_second != 0 ? rate_cap_bytes_per_second : link_peak_bytes_per_second;
  }
};

/// Counters of one priority class.
struct transfer_class_metrics {
  std::size_t queue_depth = 0;  ///< requests queued or partly issued now.
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t failed = 0;
  latency_summary latency;  ///< submission to completion, completed requests only.
};

/// Counters of the decode requests (submit_decode): what crossed the link against what it became.
/// Their wire bytes are also in h2d.bytes (the link carries them); their logical bytes are not.
struct transfer_decode_metrics {
  std::uint64_t pieces = 0;         ///< pieces copied and decoded (completed).
  std::uint64_t wire_bytes = 0;     ///< coded bytes of those pieces (what the link carried).
  std::uint64_t logical_bytes = 0;  ///< decoded bytes they wrote.
  /// Device time of the decodes alone (sum over pieces, timed events around each decode; on a
  /// timing-only sim the modelled time).
  std::uint64_t decode_ns = 0;
  /// Time with at least one piece copied or decoding (host clock, as busy_ns of a direction).
  std::uint64_t busy_ns = 0;
  /// logical_bytes / busy_ns in GB/s (1e9 bytes/s): the page-in rate the decode path delivers.
  double effective_logical_gbps() const noexcept {
    return busy_ns ? static_cast<double>(logical_bytes) / static_cast<double>(busy_ns) : 0.0;
  }
};

/// A snapshot of the engine's counters.
struct transfer_metrics {
  transfer_decode_metrics decode;  ///< submit_decode requests.
  transfer_direction_metrics h2d;
  transfer_direction_metrics d2h;
  transfer_direction_metrics d2d;
  std::array<transfer_class_metrics, transfer_priority_count> classes{};
  std::uint64_t elapsed_ns = 0;  ///< since construction.
};

/// Measures the copy bandwidth of `direction` (H2D or D2H) with pinned host memory: one warm-up
/// copy of `bytes`, then `repeats` timed ones on a stream of its own. Allocates and frees its own
/// buffers. Synchronous; meant for start-up and benchmarks. Returns bytes per second (>= 1).
/// @throws htp::invalid_argument if bytes == 0, repeats < 1 or direction is not H2D or D2H;
/// htp::out_of_memory if the buffers cannot be allocated.
std::uint64_t measure_copy_bandwidth(device& dev, copy_direction direction, std::size_t bytes,
                                     int repeats);

/// The transfer engine. Thread-safety: every member may be called from any thread concurrently.
/// Lifetime: `dev` must outlive the engine; the memory regions must stay valid while requests on
/// them are queued or in flight. The destructor cancels queued requests, lets partly issued ones
/// finish (at the configured rate), joins its threads, and frees everything it allocated.
class transfer_engine {
 public:
  /// Creates the streams, events and value words, and calibrates each direction whose link rate
  /// the config does not give (a few copies of config.calibration_bytes; tens of ms).
  /// @throws htp::invalid_argument on a bad config (chunk_bytes 0, max_in_flight_chunks 0, a rate
  /// of 0, a burst smaller than a chunk, a cap fraction outside (0, 1]).
  explicit transfer_engine(device& dev, transfer_config config = {});
  /// Never throws.
  ~transfer_engine();
  transfer_engine(const transfer_engine&) = delete;
  transfer_engine& operator=(const transfer_engine&) = delete;

  /// Queues a copy of `bytes` from `src` to `dst`; returns at once. `direction` H2D goes on the
  /// prefetch stream; D2H and D2D on the reduction stream. Both ranges must stay valid until the
  /// request completes. Nothing is issued when it throws.
  /// @throws htp::invalid_argument on a null pointer, zero bytes, overlapping ranges, direction
  /// H2H, or a source or destination not inside one region the engine was given (the host end
  /// must be pinned memory the engine knows: a pageable one would make the copy synchronous).
  transfer_ticket submit(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                         transfer_priority priority);
  /// As submit, but the request's first chunk is ordered on the device after each event in
  /// `after`: the engine's stream waits on them (the host never does). This is how memory still
  /// read by a kernel is reused without a host round trip: the copy into it waits on the kernel's
  /// release event. Later requests on the same stream wait too (streams run in order). The events
  /// must not be re-recorded or destroyed until the request has finished.
  /// @throws as the submit above; htp::invalid_argument for a null event in `after`.
  transfer_ticket submit(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                         transfer_priority priority, std::vector<event_ref> after);

  /// A host-to-device request whose source is `file` at [offset, offset + bytes) instead of host
  /// memory: each chunk is read (pread, by the prefetch lane's dispatcher, outside the engine's
  /// lock) into one of max_in_flight_chunks pinned bounce buffers of chunk_bytes, then copied from
  /// it; a buffer is reused once its copy completes. Priorities, caps and `after` work as for
  /// submit, with one limit: while the dispatcher reads a chunk, no other host-to-device chunk is
  /// issued (a fault waits for at most one chunk's read). A read error fails the request with the
  /// system's message. The file must be modelled exactly when the device is timing-only. Calls
  /// prepare_file_reads() first (a no-op once done). `chunk_checksums`, when given (and
  /// transfer_config::verify_page_ins is on, on a device that stores bytes), holds htp::checksum
  /// of each chunk of the range as the engine cuts it (chunk k: bytes [k * chunk_bytes, ...) of
  /// the range): each chunk is checksummed in HBM after its copy and a mismatch fails the request
  /// with htp::corrupt_data (wait() rethrows it) naming the file, the offset and the chunk.
  /// @throws htp::invalid_argument for a null file or destination, zero bytes, a range past the
  /// end of the file, a real file on a timing-only device or a modelled one on a device that
  /// stores bytes, a destination outside the engine's regions, or chunk_checksums of another
  /// count than the request's chunks; htp::out_of_memory if the bounce buffers cannot be
  /// allocated.
  transfer_ticket submit_from_file(
      void* dst, std::shared_ptr<const tensor_file> file, std::uint64_t offset, std::size_t bytes,
      transfer_priority priority, std::vector<event_ref> after = {},
      std::shared_ptr<const std::vector<std::uint64_t>> chunk_checksums = nullptr);

  /// Allocates the bounce buffers file requests use (max_in_flight_chunks pinned buffers of
  /// chunk_bytes, each with a pinned checksum word behind it) and the verify stream, once: a slow
  /// call (pinned memory), made on the caller's thread with no engine lock held. Call it at set-up
  /// (pager::register_file_tensor does). Thread-safe.
  /// @throws htp::out_of_memory if the pinned memory cannot be allocated (nothing is kept).
  void prepare_file_reads();

  /// A host-to-device request that copies a chunk-frame sequence (codec.hpp: split_frame,
  /// verify_chunk_frames) piece by piece into an HBM staging buffer on the prefetch stream and
  /// decodes each piece into [dst + piece.decoded_offset, ...) on the engine's decode stream, which
  /// waits for that piece's copy only: piece i + 1 copies while piece i decodes. The staging ring
  /// is max_in_flight_chunks device buffers of chunk_bytes (prepare_decode), a buffer reused once
  /// its decode has completed. Each piece is one chunk of the request: it takes its wire bytes from
  /// the token bucket, counts in max_in_flight_chunks, and the request completes (its word is
  /// written, on the decode stream) only after the last decode. Priorities, need times,
  /// cancellation, wait_on and `after` work as for submit. The wire bytes come from pinned host
  /// memory `src` (a region the engine knows) of layout->wire_bytes; the layout must describe them
  /// (verify_chunk_frames on real bytes). With transfer_config::verify_page_ins each piece's
  /// decode verifies it on the device first (a status word per staging buffer): a corrupt piece
  /// fails the request with htp::corrupt_data naming the piece, its offset and the file (or the
  /// host copy), and nothing else. Without it a decode that fails (a corrupt piece on sim) fails
  /// the request and the decode stream. Calls prepare_decode() first.
  /// @throws htp::invalid_argument for a null pointer or layout, an empty layout, a piece larger
  /// than chunk_bytes, or ranges outside the engine's regions; htp::out_of_memory if the staging
  /// buffers cannot be allocated.
  transfer_ticket submit_decode(void* dst, const void* src,
                                std::shared_ptr<const coded_layout> layout,
                                transfer_priority priority, std::vector<event_ref> after = {});
  /// As submit_decode, with the wire bytes read from `file` at offset (through the bounce buffers
  /// of submit_from_file, which it prepares). @throws as submit_decode and submit_from_file.
  transfer_ticket submit_decode_from_file(void* dst, std::shared_ptr<const tensor_file> file,
                                          std::uint64_t offset,
                                          std::shared_ptr<const coded_layout> layout,
                                          transfer_priority priority,
                                          std::vector<event_ref> after = {});
  /// Queues a page-in of a tensor from its source into `dst` (`src.bytes` bytes): a plain copy
  /// from host memory (submit), a read of its file (submit_from_file, with its chunk checksums),
  /// or the decode of its chunk-frame sequence from either (submit_decode,
  /// submit_decode_from_file). The one entry the pager loads through: the kind of source is
  /// decided here, not by the caller. @throws as the request it makes; htp::invalid_argument for
  /// a source with no bytes to load (source_place::none).
  transfer_ticket submit_load(void* dst, const tensor_source& src, transfer_priority priority,
                              std::vector<event_ref> after = {});
  /// Creates the decode stream, its events and the staging ring (max_in_flight_chunks device
  /// buffers of chunk_bytes, outside any pager budget, and a pinned status word for each), once:
  /// slow (device allocation), made on the caller's thread with no engine lock held. Thread-safe.
  /// @throws htp::out_of_memory if the device memory is not there (nothing is kept);
  /// htp::cuda_error if a stream or event cannot be created.
  void prepare_decode();

  /// Cancels a request none of whose chunks has been issued; returns whether it did. Streams
  /// waiting on it (wait_on) are released; nothing was copied.
  /// @throws htp::invalid_argument for a ticket this engine never returned.
  bool cancel(transfer_ticket t);

  /// Moves a request with chunks still to issue (queued or partly issued) to a higher priority
  /// class, in its place there by issue key (for faults: by submission); its `after` events and
  /// completion word stay. Never
  /// lowers a priority. Returns whether it moved. Used when a prefetch turns urgent (a late
  /// prefetch). @throws htp::invalid_argument for a ticket this engine never returned.
  bool raise_priority(transfer_ticket t, transfer_priority priority);

  /// Says when a request with chunks still to issue is needed (steady clock): within its class it
  /// then issues by min(need, submission + max_deadline_wait), earliest first (a fault ignores
  /// it). May be called again (a need that came closer). O(log n). Returns whether the request
  /// had chunks left to order. Thread-safe. @throws htp::invalid_argument for a ticket this engine
  /// never returned.
  bool set_need_time(transfer_ticket t, std::chrono::steady_clock::time_point need);

  /// Makes work queued on `compute` after this call wait until the request has completed, without
  /// blocking the host, even if its chunks have not been issued yet. A no-op for a request that has
  /// already finished; a cancelled or failed request releases the stream (check status()).
  /// @throws htp::invalid_argument for an unknown ticket or a null stream.
  void wait_on(transfer_ticket t, stream_ref compute);

  /// Blocks the calling host thread until the request has finished.
  /// @throws htp::invalid_argument for an unknown ticket; htp::io_error if reading its file
  /// failed (submit_from_file, submit_decode_from_file: the file's path and the read's errno);
  /// htp::corrupt_data if a chunk failed its verification (transfer_config::verify_page_ins: the
  /// file or host copy, the offset and the chunk); htp::logic_error if it failed otherwise (the
  /// message says why).
  void wait(transfer_ticket t);

  /// Blocks until every request submitted so far has finished.
  /// Never throws (a failed request is reported by wait or status, not here).
  void drain();

  /// The requests that finished (complete, cancelled or failed) since the last call, oldest first,
  /// each with its outcome and latency. Empty unless transfer_config::finished_queue is set.
  /// Thread-safe; one consumer expected.
  /// Never throws.
  std::vector<finished_transfer> take_finished();

  /// True once nothing of the request remains to be done (complete, cancelled, failed, expired).
  /// @throws htp::invalid_argument for a ticket this engine never returned.
  bool is_complete(transfer_ticket t) const;
  /// The request's state. @throws htp::invalid_argument for an unknown ticket.
  transfer_status status(transfer_ticket t) const;
  /// Submission-to-completion time of a completed request; nullopt otherwise (or once expired).
  /// @throws htp::invalid_argument for a ticket this engine never returned.
  std::optional<std::chrono::nanoseconds> latency(transfer_ticket t) const;

  /// Sets the cap of `direction` (H2D or D2H) from now on. @throws htp::invalid_argument if
  /// bytes_per_second == 0 or the direction has no link (D2D, H2H).
  void set_rate(copy_direction direction, std::uint64_t bytes_per_second);
  /// Removes the cap of `direction` (H2D or D2H).
  /// @throws htp::invalid_argument if the direction has no link (D2D, H2H).
  void set_unlimited(copy_direction direction);

  /// A consistent snapshot of the counters.
  /// Never throws.
  transfer_metrics metrics() const;
  /// The calibrated (or configured) link peak of H2D or D2H, bytes per second.
  /// @throws htp::invalid_argument if the direction has no link (D2D, H2H).
  std::uint64_t link_peak(copy_direction direction) const;
  /// The rate H2D or D2H runs at now: its cap, or its link peak when uncapped (bytes per second).
  /// Thread-safe. @throws htp::invalid_argument for a direction without a link (D2D, H2H).
  std::uint64_t effective_rate(copy_direction direction) const;

  /// Lets D2H copies write into host memory `r` from now on (caller memory the pager was lent).
  /// Thread-safe. @throws htp::invalid_argument for an empty region or one overlapping another.
  void add_host_memory(memory_region r);
  /// Undoes add_host_memory. The caller guarantees no copy into it is pending.
  /// @throws htp::invalid_argument if `ptr` does not start a region added before.
  void remove_host_memory(const void* ptr);

  /// The engine's H2D stream. Valid for the engine's lifetime; do not destroy it.
  stream_ref prefetch_stream() const noexcept;
  /// The engine's D2H / D2D stream. Valid for the engine's lifetime; do not destroy it.
  stream_ref reduction_stream() const noexcept;
  /// The configuration, with defaults resolved (rates, bursts, link peaks filled in).
  const transfer_config& config() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace htp
