// The pager: what a model runner calls. Tensors are registered by handle and live in pinned host
// RAM; acquire() pages them into HBM on demand (a page fault) unless a prefetch brought them
// already; release() hands them back, stream-ordered; eviction makes room when HBM is full.
//
// Note [Pager]
// - Tiers: one slab allocator over HBM and one over pinned host memory, both reserved up front.
//   Every registered tensor keeps its host extent for life; the HBM extent comes and goes. The
//   exception is a device-resident tensor (register_resident): HBM for life, no host extent.
// - States: host -> loading (H2D in flight) -> resident (-> writing_back, D2H in flight, for a
//   dirty mutable tensor being evicted) -> host. A resident tensor may also be moving (compaction
//   D2D in flight); acquirers are ordered after the move.
// - Stream order: acquire makes `compute` wait for the tensor's pending copy on the GPU (stream
//   value words, see transfer_engine.hpp); the host does not block unless asked (wait = true).
//   release records an event on `compute`; the HBM extent is neither evicted, moved nor reused
//   before that event completes.
// - Eviction: Belady's rule (farthest next use) when a schedule is set, LRU otherwise. A prefetch
//   never evicts a tensor needed sooner than the one it brings in, and never blocks the host.
// - Out of memory, for a demand fault, a ladder, each rung counted in the metrics:
//   1. evict clean unpinned tensors; 2. write back and evict dirty ones; 3. wait for releases and
//   copies still in flight; 4. compact; 5. if config.on_oom == allow_degraded, serve the tensor
//   from pinned host memory mapped into the GPU (zero-copy; the span says degraded); 6. throw
//   htp::out_of_memory with the full diagnostic. A failure leaves every other tensor intact and the
//   failed one wholly where it was.
// - Thread safety: every member may be called from any host thread concurrently.
// See docs/pager.md.
#pragma once

#include <htp/codec.hpp>
#include <htp/device.hpp>
#include <htp/metrics.hpp>
#include <htp/tensor_file.hpp>
#include <htp/transfer_engine.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace htp {

/// What a tensor holds, which decides what eviction costs.
enum class tensor_kind {
  weight,         ///< read-only; the host copy is authoritative; eviction just frees HBM.
  mutable_state,  ///< KV-cache blocks: eviction writes a dirty copy back first.
  /// A training step's saved tensor: mutable, and its content lives only from its first write to
  /// its last use (docs/pager.md, "Activations"). Registered dead (no source); an acquire of a
  /// dead one allocates HBM and copies nothing in (its bytes are undefined until the kernels write
  /// them); release(dirty = true) makes it live; eviction writes a live one back to its host
  /// extent (reserved at registration, written only then); release_last_use (or discard, for an
  /// unpinned one) makes it dead again, freeing its HBM with no write-back.
  activation,
};

/// Whether kernels may write tensors of `kind` (a dirty copy is written back on eviction).
constexpr bool is_mutable(tensor_kind kind) noexcept { return kind != tensor_kind::weight; }

/// A registered tensor. A value: copy it freely. The generation makes a handle stale once its
/// tensor is unregistered, even after the slot is reused.
struct tensor_handle {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;  ///< 0 = null handle
  std::uint32_t owner = 0;       ///< the pager that gave it out (its calls refuse another's)
  explicit operator bool() const noexcept { return generation != 0; }
  friend bool operator==(tensor_handle a, tensor_handle b) noexcept {
    return a.index == b.index && a.generation == b.generation && a.owner == b.owner;
  }
  friend bool operator!=(tensor_handle a, tensor_handle b) noexcept { return !(a == b); }
};

/// Where an acquired tensor's bytes are, valid on the acquiring stream until release.
struct device_span {
  void* data = nullptr;  ///< device address (HBM, or mapped host memory when degraded).
  std::size_t bytes = 0;
  bool degraded = false;  ///< true: served from pinned host memory over the link (slow, correct).
  /// The address as a typed pointer.
  template <typename T>
  T* as() const noexcept {
    return static_cast<T*>(data);
  }
};

/// What the last rung of the out-of-memory ladder does.
enum class oom_policy {
  throw_error,     ///< throw htp::out_of_memory.
  allow_degraded,  ///< serve from mapped pinned host memory (zero-copy) before throwing.
};

/// How victims are chosen.
enum class eviction_rule {
  automatic,  ///< Belady's rule while a schedule is set, LRU otherwise.
  lru,        ///< least recently acquired first, even with a schedule (prefetch still uses it).
  belady,     ///< farthest next use in the schedule (LRU for tensors the schedule never names).
};

/// How a schedule-aware prefetch picks its victim (Belady's rule active; see docs/pager.md).
enum class prefetch_mode {
  /// Evict the tensor used farthest in the future outside the lookahead window. Keeps
  /// lookahead + 1 slots rotating, so loads overlap the previous layers' compute; in tight memory
  /// it pages in more than Belady's minimum (at most one extra page-in per access).
  pipeline,
  /// Make only the eviction a demand fault would make when the tensor is first used, and only if
  /// that victim is not needed before then. So prefetching never adds a page-in to demand paging
  /// with the same rule, for any tensor sizes (docs/pager.md); in tight memory the load waits for
  /// the previous layer's compute (little overlap). The default.
  min_page_ins,
};

/// How far ahead of the cursor the schedule is prefetched (see docs/pager.md, "Lookahead").
enum class lookahead_mode {
  /// The next `prefetch_lookahead` tensors, whatever their sizes.
  count,
  /// Ahead in bytes and time: walk the upcoming accesses, prefetching each tensor not in HBM,
  /// until the bytes of the window's loads still in flight, plus the bytes prefetched and not yet
  /// used, take the link at least as long as the predicted compute time until the window's last
  /// tensor is used. The compute time is measured on the device, per schedule position (the gap
  /// between one acquire's waits being met and the next acquire). Bounded by HBM (a prefetch never
  /// evicts a tensor needed sooner) and by `lookahead_max_tensors`. The default. Applies with
  /// Belady's rule and prefetch_mode::min_page_ins (the defaults); with LRU eviction or the
  /// pipeline prefetch, whose victims assume a window of prefetch_lookahead tensors, it counts.
  automatic,
};

/// What caller memory lent with pager::add_host_region is.
enum class host_region_kind {
  /// Already page-locked by the caller (cudaHostAlloc, cudaHostRegister, or memory from
  /// device::allocate(pinned_host)): used as it is.
  pinned,
  /// Ordinary memory: htp registers it with the driver (cudaHostRegister) while it lends it.
  pageable,
  /// Read-only memory, e.g. a safetensors file mapped with PROT_READ: registered read-only; only
  /// weights may live in it (nothing is ever written back there).
  pageable_read_only,
};

/// Configuration of a pager.
struct pager_config {
  std::size_t hbm_budget_bytes = 0;  ///< HBM the pager reserves; at least one slab.
  /// Pinned host memory it reserves for the tensors it copies in (register_tensor). 0 = none: every
  /// tensor lives in caller memory (register_tensor_at). Bounded by the address space (128 TiB),
  /// not by MemTotal, which a microVM reports far below the RAM it can pin: memory the host cannot
  /// pin fails where it is pinned, as htp::out_of_memory naming the host's free memory.
  std::size_t host_budget_bytes = 0;
  std::size_t slab_bytes = std::size_t{64} << 20;  ///< reservation unit; power of two from 64 KiB.
  /// Allocation unit of both tiers: a tensor wastes less than one page to rounding. A power of two
  /// from 4 KiB to slab_bytes, or 0 for automatic (64 KiB; larger for tiers over 128 GiB).
  std::size_t page_bytes = 0;
  std::size_t chunk_bytes = std::size_t{2} << 20;  ///< transfer chunk size.
  std::size_t max_in_flight_chunks = 3;            ///< per direction.
  transfer_link_config
      h2d;  ///< rate caps; unset = 80% of the calibrated link (see transfer_engine.hpp)
  transfer_link_config d2h;
  /// How far ahead the schedule is prefetched at each acquire and release.
  lookahead_mode lookahead = lookahead_mode::automatic;
  /// `count` mode: tensors prefetched ahead at each acquire/release (0 = none, in either mode).
  unsigned prefetch_lookahead = 2;
  /// `automatic` mode: the most schedule positions one call examines (its cost bound); 1 to 4096.
  unsigned lookahead_max_tensors = 256;
  /// Routed groups (set_routed_group): the half-life of a member's popularity, in acquires of any
  /// member of any group (one clock, so scores compare across groups); popularity ranks which
  /// members are guessed ahead of the router and which are evicted. A decode step of a
  /// mixture-of-experts model makes layers x top-k x matrices-per-expert such acquires (Mixtral,
  /// 32 layers: 192), so 4096 is about 21 steps there. Shorter follows drifting routing faster and
  /// ranks stationary routing worse (htp-moe-bench, docs/benchmarks.md: 64 paged 29% more at 50%).
  double popularity_half_life = 4096;
  eviction_rule eviction = eviction_rule::automatic;
  prefetch_mode prefetch = prefetch_mode::min_page_ins;
  double compaction_threshold = 0.15;  ///< HBM fragmentation that triggers compaction.
  bool auto_compact = true;            ///< compact in the background past the threshold.
  oom_policy on_oom = oom_policy::throw_error;
  std::chrono::milliseconds latency_budget{200};  ///< end-to-end budget, for reports and warnings.
  bool trace = false;                             ///< keep a per-stream event trace (write_trace).
  /// Spans the trace keeps: a ring holding the most recent ones (older ones are overwritten, and
  /// write_trace's "otherData.dropped_spans" counts them). ~100 bytes each; 0 is taken as 1.
  std::size_t trace_capacity = std::size_t{1} << 18;
  /// Checked mode: poison HBM extents when they are freed (0xDB) so a stale read fails its
  /// checksum instead of passing by luck, and audit the allocators after every operation.
  bool checked = false;
  /// Timing-only devices hold no bytes, so a compressed weight (register_tensor with a
  /// weight_format) cannot be encoded there: its wire size is modelled as bytes x this ratio (per
  /// chunk), in (0, 1]. The default, 0.68, is the codec's bf16 ratio on the Llama-like weights
  /// (0.684, docs/codec.md) and DFloat11's published 0.676-0.695 on Llama 3.x. Unused on a
  /// device that stores bytes (the real frame's size counts).
  double modelled_compression_ratio = 0.68;
  /// Verify page-ins from files and of compressed weights on the device (transfer_config::
  /// verify_page_ins): register_file_tensor reads the tensor once to take htp::checksum of each
  /// chunk_bytes chunk, and each page-in checksums the chunks in HBM after their copies (on a
  /// stream of their own); a compressed weight's pieces are checked (header, check word, chunk
  /// checksums) by the device decode. A mismatch fails that acquire with htp::corrupt_data naming
  /// the tensor and the file; the tensor stays on its source and the pager and device work on.
  /// Costs: one read of each file-backed tensor at registration, and a checksum kernel per chunk
  /// (docs/benchmarks.md, "Verified page-ins"). Off: the file is trusted (a compressed piece that
  /// changed fails the decode stream for good on sim, and decodes to undefined bytes on cuda).
  /// Nothing is verified on a timing-only device (no bytes).
  bool verify_page_ins = true;
};

/// Where a tensor is now.
enum class residency { host, loading, resident, writing_back };
const char* to_string(residency r) noexcept;

/// A snapshot of one tensor's state (for tests, tools and diagnostics).
struct tensor_info {
  std::string name;
  std::size_t bytes = 0;
  tensor_kind kind = tensor_kind::weight;
  residency where = residency::host;
  int pins = 0;                 ///< acquires not yet released.
  bool dirty = false;           ///< the HBM copy is newer than the host copy.
  bool degraded = false;        ///< currently acquired in degraded (zero-copy) mode.
  bool copy_in_flight = false;  ///< a load, write-back or move has not completed.
  bool device_resident =
      false;  ///< registered with register_resident: in HBM for life, no host copy.
  /// An activation whose content is dead: registered and not yet written, or past
  /// release_last_use or discard. Its next acquire is fresh (no page-in); its host copy is stale.
  bool dead = false;
};

class pager {
 public:
  /// Reserves both tiers and starts the transfer engine (which calibrates the link unless the
  /// config gives its rate). `dev` must outlive the pager.
  /// @throws htp::invalid_argument for a bad config (naming the field); htp::out_of_memory if a
  /// budget cannot be reserved.
  pager(device& dev, pager_config config);
  /// Waits for every copy in flight and every release event, then frees both tiers.
  /// Tensors still registered are dropped. Never throws.
  ~pager();
  pager(const pager&) = delete;
  pager& operator=(const pager&) = delete;

  /// Registers a tensor of `bytes` bytes: its host extent is allocated and filled from `source`
  /// (`bytes` readable bytes; null = zero-filled; on a timing-only device nothing is filled and
  /// `source` is not read). State: host. An activation takes no source: it starts dead, its host
  /// extent reserved and not filled.
  /// @throws htp::invalid_argument if bytes == 0, the tensor could never fit in HBM and
  /// on_oom != allow_degraded, or an activation is given a source; htp::out_of_memory if the host
  /// tier is full (nothing changes).
  tensor_handle register_tensor(std::string name, std::size_t bytes, tensor_kind kind,
                                const void* source = nullptr);
  /// Registers a weight stored compressed (docs/pager.md, "Compressed weights"): `source` (`bytes`
  /// of `format` weights; null = zeros) is encoded by the calling thread, with helper threads up
  /// to the machine's cores for a large weight (htp::encode_weights with threads = 0, a few
  /// hundred MB/s per core: call it at set-up; the time is counted in metrics().encode_ns)
  /// into a chunk-frame sequence (htp::split_frame) with chunks that fit the engine's
  /// chunk_bytes, and only those wire bytes are kept in the host tier. Each page-in copies them
  /// piece by piece into an HBM staging ring and decodes each piece into the tensor's extent
  /// (transfer_engine::submit_decode): the token bucket counts wire bytes, the copy of piece i + 1
  /// overlaps the decode of piece i, and the tensor is ready only once decoded. Eviction,
  /// Belady's rule, lookahead and fault priority work as for any tensor; copy_to_host decodes on
  /// the CPU. If the weights would not shrink (the sequence is not smaller than `bytes`), the
  /// tensor is stored as is, as register_tensor(name, bytes, kind, source) does (metrics'
  /// compressed_tensors says which). On a timing-only device nothing is encoded: the wire size is
  /// modelled (pager_config::modelled_compression_ratio) and the decode time by the device
  /// (sim_config::decode_bytes_per_second). Not servable in degraded mode (there is no raw host
  /// copy to map): it must fit in HBM, and when the ladder is exhausted its acquire throws
  /// out_of_memory even with allow_degraded. Thread-safe. State: host.
  /// @throws htp::invalid_argument for a mutable tensor (compression is for weights: a tensor the
  /// kernels write would have to be re-encoded at every write-back), bytes == 0, a tensor larger
  /// than the largest HBM extent, pager_config::chunk_bytes under 4152 (a chunk must hold a 4 KiB
  /// codec chunk and its 56-byte header), or no host tier; htp::out_of_memory if the host tier is
  /// full (nothing changes) or the engine's staging buffers cannot be made.
  tensor_handle register_tensor(std::string name, std::size_t bytes, tensor_kind kind,
                                const void* source, weight_format format);
  /// Registers a compressed weight backed by a companion file (htp-compress writes them): `file`
  /// at [offset, offset + wire_bytes) holds a chunk-frame sequence (htp::split_frame), which is
  /// read and verified here (verify_chunk_frames: header checks and every chunk checksum) so a
  /// corrupt companion is refused before anything is registered. Its decoded size is the tensor's
  /// size. Page-ins read the pieces through the engine's bounce buffers and decode them as
  /// register_tensor with a format does; there is no host copy (host memory: the record and the
  /// layout, 32 bytes per chunk). Not servable in degraded mode (as register_file_tensor). The
  /// file must not change while registered (page-ins do not re-verify it). Thread-safe.
  /// @throws htp::corrupt_data naming the failed check (nothing registered); htp::io_error if the
  /// file cannot be read; htp::invalid_argument for a null file, wire_bytes == 0, a range past the
  /// end of the file, a piece larger than pager_config::chunk_bytes (write the companion with
  /// smaller chunks), a tensor that can never fit in HBM, or a timing-only device (it stores no
  /// bytes to verify: use register_tensor with a format there); htp::out_of_memory if the bounce
  /// or staging buffers cannot be made.
  tensor_handle register_compressed_file_tensor(std::string name,
                                                std::shared_ptr<const tensor_file> file,
                                                std::uint64_t offset, std::size_t wire_bytes);
  /// Registers a compressed weight whose chunk-frame sequence (`layout->wire_bytes` at
  /// `host_ptr`) is caller memory inside a region lent with add_host_region, as register_tensor_at
  /// does for raw bytes: htp never copies nor frees it. On a device that stores bytes the memory
  /// is verified against the layout (verify_chunk_frames); on a timing-only device the layout is
  /// taken as given (model_chunk_frames). Page-ins, refusals and degraded mode as register_tensor
  /// with a weight_format. For a node's shared host tier (node::register_sharded_compressed).
  /// Thread-safe. @throws htp::invalid_argument for a null or empty layout, a decoded size larger
  /// than the largest HBM extent, a piece larger than pager_config::chunk_bytes, memory that does
  /// not hold what the layout says, or a range outside the lent regions; htp::corrupt_data for a
  /// corrupt sequence; htp::out_of_memory if the engine's staging buffers cannot be made.
  tensor_handle register_compressed_tensor_at(std::string name, void* host_ptr,
                                              std::shared_ptr<const coded_layout> layout);
  /// Registers a tensor whose authoritative host copy is caller memory: `bytes` bytes at
  /// `host_ptr`, inside a region lent with add_host_region. htp never copies nor frees it; a dirty
  /// mutable tensor is written back there. State: host. Host memory htp uses for it: none (the
  /// record, ~200 bytes).
  /// @throws htp::invalid_argument if bytes == 0, the range is not inside one lent region, a
  /// mutable tensor is placed in a read-only region, or the tensor could never fit in HBM (as
  /// register_tensor).
  tensor_handle register_tensor_at(std::string name, std::size_t bytes, tensor_kind kind,
                                   void* host_ptr);
  /// Registers a device-resident tensor: `bytes` of HBM taken now (evicting pageable tensors as a
  /// fault would) and filled from `source` (`bytes` readable host bytes, pageable or pinned; null =
  /// zeros), blocking until the bytes are there. It holds no host memory: it is never evicted,
  /// written back nor moved by compaction, so register such tensors at set-up, before the paged
  /// ones fragment HBM. acquire/release work as for any tensor (a hit, always); release's `dirty`
  /// is accepted for mutable ones and changes nothing; copy_to_host reads HBM; evict refuses it.
  /// For weights kept in HBM all run long and for scratch (staging buffers, workspaces).
  /// @throws htp::invalid_argument if bytes == 0, it is larger than any HBM extent, or it is an
  /// activation (one that stays in HBM needs no pager: use mutable_state);
  /// htp::out_of_memory when HBM cannot make room (pinned tensors and other device-resident ones
  /// fill it); htp::cuda_error if the fill fails. Nothing is left behind on failure.
  tensor_handle register_resident(std::string name, std::size_t bytes, tensor_kind kind,
                                  const void* source = nullptr);
  /// Registers a weight backed by `file` at [offset, offset + bytes): it has no host copy (host
  /// memory htp uses for it: the record), and each page-in reads it from the file through the
  /// transfer engine's bounce buffers (transfer_engine::submit_from_file), at the load's priority
  /// and under the link caps; eviction just drops the HBM copy. copy_to_host reads the file. Not
  /// servable in degraded mode (there is no host copy to map): when the ladder is exhausted its
  /// acquire throws out_of_memory even with allow_degraded. The file must outlive the tensor (the
  /// record holds it). With pager_config::verify_page_ins (the default) it reads the range once
  /// here, chunk by chunk through one chunk_bytes buffer (pread, no lock held), to take each
  /// chunk's htp::checksum (8 bytes of host memory per chunk); each page-in is checked against
  /// them on the device, and a file that changed fails it with htp::corrupt_data. State: host.
  /// Thread-safe; the first one made allocates the bounce buffers.
  /// @throws htp::invalid_argument for a null file, bytes == 0, a range past the end of the file,
  /// a tensor that can never fit in HBM, a real file on a timing-only device or a modelled one on
  /// a device that stores bytes; htp::io_error if the file cannot be read for the checksums;
  /// htp::out_of_memory if the engine's bounce buffers cannot be made.
  tensor_handle register_file_tensor(std::string name, std::size_t bytes,
                                     std::shared_ptr<const tensor_file> file, std::uint64_t offset);
  /// Lends caller memory [ptr, ptr + bytes) to the pager for register_tensor_at: an mmap'd file,
  /// the runner's own pinned buffers. `pageable` kinds are registered with the driver here (slow,
  /// like pinning: call at set-up). The memory stays the caller's and must outlive the region.
  /// A `pinned` region must be mapped for this pager's GPU (device::mapped_device_pointer accepts
  /// its first and last byte): page-locked memory that is not, or plain memory called pinned, would
  /// make its copies synchronous; both backends refuse it.
  /// @throws htp::invalid_argument for a null or empty range, one overlapping another region, or a
  /// `pinned` one that is not; htp::cuda_error if the driver refuses to register it.
  void add_host_region(void* ptr, std::size_t bytes, host_region_kind kind);
  /// Takes a region back (unregistering it from the driver when htp registered it).
  /// @throws htp::invalid_argument if `ptr` does not start a lent region or tensors still live in
  /// it.
  void remove_host_region(void* ptr);
  /// Whether [ptr, ptr + bytes) lies inside one region lent with add_host_region (so that
  /// register_tensor_at takes it without a region of its own). Thread-safe.
  bool in_host_region(const void* ptr, std::size_t bytes) const;
  /// Drops a tensor and frees its memory, waiting for its copies and release events.
  /// @throws htp::invalid_argument for a stale handle or a tensor still acquired.
  void unregister_tensor(tensor_handle h);

  /// Makes the tensor available on `compute` and pins it. If it is not in HBM this is a page fault:
  /// the copy goes at fault priority and `compute` waits for it on the GPU. With wait = true the
  /// host also blocks until the bytes have arrived and everything `compute` was made to wait for
  /// has passed (other streams' writes to a mutable tensor; for a fresh activation, the kernels
  /// still using its new extent), so host code may read and write the memory at once. A tensor may
  /// be acquired several times (on several streams); each acquire needs its release.
  /// @throws htp::invalid_argument for a stale handle; htp::logic_error when `compute` is
  /// capturing a CUDA graph (device::begin_capture: a graph cannot replay what a dynamic acquire
  /// decides; capture a static plan, static_step.hpp); htp::out_of_memory when the ladder is
  /// exhausted (the message has the diagnostic); htp::io_error if the page-in of a file-backed
  /// tensor could not read its file; htp::corrupt_data if its page-in failed its verification
  /// (pager_config::verify_page_ins: the bytes of its file, or a compressed tensor's pieces,
  /// changed after registration; the message names the tensor, the file and the chunk; the tensor
  /// is back in `host` state and a later acquire tries again); htp::cuda_error if a copy failed
  /// on the device. A page-in that fails after an acquire without `wait` returned is reported by
  /// the last release of it instead, with the same type (htp::corrupt_data, htp::io_error;
  /// htp::cuda_error for a device failure): the kernels ordered after the acquire read undefined
  /// bytes, so their results must be dropped. The next acquire of it tries again.
  device_span acquire(tensor_handle h, stream_ref compute, bool wait = false);
  /// Unpins one acquire. Records an event on `compute`: the memory is not evicted, moved or reused
  /// until the stream passes this point. `dirty` = the kernels wrote it (mutable tensors only).
  /// @throws htp::invalid_argument for a stale handle, a release without acquire, or dirty = true
  /// on a weight. Nothing changes then. htp::corrupt_data, htp::io_error or htp::cuda_error (the
  /// release took effect) when this was the last holder of a page-in that failed after its
  /// acquire returned (see acquire).
  void release(tensor_handle h, stream_ref compute, bool dirty = false);
  /// Unpins the last acquire of an activation, as release() does, and marks its content dead:
  /// this was its last use (the backward pass read it). Stream order: an event is recorded on
  /// `compute`, and the HBM extent goes back to the pager at once, fenced by that event: nothing
  /// is copied into it, and no acquire's kernels use it, before `compute` passes this point. No
  /// write-back of dead content is ever started, and the host copy is stale from now on. A
  /// write-back or compaction move already in flight for it (started before the acquire) is let
  /// finish; the extent is freed when it does. The next acquire is fresh (see
  /// tensor_kind::activation). Thread-safe, like release.
  /// @throws htp::invalid_argument for a stale handle, a tensor that is not an activation, one
  /// not acquired, or one still pinned by other acquires (release those first): nothing changes
  /// then. htp::corrupt_data, htp::io_error or htp::cuda_error as release does when its page-in
  /// failed after the acquire returned (the release took effect).
  void release_last_use(tensor_handle h, stream_ref compute);
  /// Marks the content of an activation that no acquire holds dead, without a use: what
  /// release_last_use does at a last use, for a saved tensor that will not be read again (its
  /// graph was dropped, or its holder let it go after reading it). Its HBM extent, if it is
  /// resident, goes back to the pager now; it is never written back, its host copy is stale from
  /// now on, and its next acquire is fresh (no page-in; see tensor_kind::activation). A copy in
  /// flight for it is let finish and the extent freed when it ends: a write-back (an eviction in
  /// progress: its completion leaves nothing live, and the bytes it wrote are stale), a page-in
  /// started by a prefetch, a compaction move. A dead activation: nothing to discard (not counted),
  /// though HBM it still holds idle (acquired and released with no write) is freed as well.
  /// Counted in pager_metrics::activation_discards. Thread-safe, like release.
  /// Stream order: discard takes no stream, and needs none. Only an unpinned tensor is accepted,
  /// so every kernel that used it was ordered before an event that its releases recorded on their
  /// streams; the extent is freed fenced by those events, as release_last_use frees it: nothing
  /// is copied into it, and no acquire's kernels use it, before each of those streams passes its
  /// last release. The host never waits.
  /// @throws htp::invalid_argument for a stale handle, a tensor that is not an activation, or one
  /// that is acquired (release it first, or end its last acquire with release_last_use): nothing
  /// changes then.
  void discard(tensor_handle h);

  /// acquire() for a list of handles in one call (a sequence's KV blocks, a layer's weights), with
  /// one lock and the same guarantees: on return every span (in the order of `hs`) is usable on
  /// `compute`. All or nothing: if one element fails, those already pinned are unpinned, the
  /// schedule is left as it was, and the error is thrown. A handle may appear once.
  /// @throws what acquire throws; htp::invalid_argument for a repeated handle.
  std::vector<device_span> acquire(const std::vector<tensor_handle>& hs, stream_ref compute,
                                   bool wait = false);
  /// release() for a list of handles: ONE event is recorded on `compute` and shared by all of
  /// them. Checks every handle first; nothing changes when one is bad.
  /// @throws what release throws.
  void release(const std::vector<tensor_handle>& hs, stream_ref compute, bool dirty = false);

  /// Hint: bring the tensor into HBM at prefetch priority. Never blocks and never evicts a tensor
  /// needed sooner; does nothing when there is no room or it is already there or coming.
  /// @throws htp::invalid_argument for a stale handle.
  void prefetch(tensor_handle h);
  /// Declares the access order (e.g. the layers of a forward pass). With `cyclic`, the sequence
  /// repeats (decode steps). Each acquire advances a cursor through it; acquires and releases
  /// prefetch the next `prefetch_lookahead` tensors; eviction follows Belady's rule. An empty
  /// sequence clears it.
  /// @throws htp::invalid_argument if it names a stale handle (the old schedule stays).
  void set_schedule(const std::vector<tensor_handle>& sequence, bool cyclic);

  /// Declares a routed group: tensors used in a data-dependent way right after the schedule's
  /// `anchor` (a mixture-of-experts layer's experts after its router), `k` of them each time. The
  /// members stay out of the schedule. The pager ranks them by popularity (how often they were
  /// acquired, with decay; half-life pager_config::popularity_half_life): when the lookahead
  /// passes `anchor` it prefetches the `k` most popular members into free room (a guess, until
  /// expect() tells; a guess never evicts a member), and among the group evicts the least
  /// popular first. Members are evicted before scheduled
  /// tensors, as tensors the schedule never names are. Declaring a group for an anchor again
  /// replaces it; an empty `members` removes it. Thread-safe.
  /// @throws htp::invalid_argument for a stale handle, an anchor that is itself a member of a
  /// group, a member in two groups, k == 0 or k > members.size() (nothing changes).
  void set_routed_group(tensor_handle anchor, const std::vector<tensor_handle>& members,
                        unsigned k);
  /// Hint: the router chose these tensors; they will be acquired soon. Each one not in HBM is
  /// loaded at prefetch priority with the earliest deadline (ahead of other prefetches, behind
  /// faults), making room as a prefetch does (never evicting a tensor needed sooner than the
  /// next access). Never blocks. Thread-safe.
  /// @throws htp::invalid_argument for a stale handle (nothing is prefetched).
  void expect(const std::vector<tensor_handle>& hs);

  /// Evicts an unpinned tensor now (writing it back if dirty), blocking until done.
  /// @throws htp::invalid_argument for a stale handle or an acquired tensor.
  void evict(tensor_handle h);
  /// Runs a full compaction of HBM now, blocking until the moves are done; returns moves made.
  /// @throws htp::cuda_error if the device fails while moves are queued (a move that fails leaves
  /// its tensor where it was).
  std::size_t compact();
  /// Copies the tensor's current bytes (the authoritative copy, wherever it is) into `dst`
  /// (`bytes` of host memory, pageable or pinned), blocking. For verification and checkpoints. A
  /// copy out of HBM runs without the pager's lock, with the tensor pinned meanwhile (an unregister
  /// or evict of it then is refused as for an acquired tensor). A compressed tensor is decoded on
  /// the CPU on every core, without the lock (its wire bytes are copied out under it first). Do
  /// not acquire a mutable tensor
  /// while its copy_to_host runs: the copy would race with the writes, as any read with a write.
  /// @throws htp::invalid_argument for a stale handle, a tensor acquired dirty-able right now
  /// (a mutable tensor that is acquired: its bytes are being written), or a timing-only device;
  /// htp::io_error if a file-backed tensor's file cannot be read (as acquire); htp::corrupt_data
  /// if a compressed tensor's bytes fail their checks, or a file-backed tensor's bytes no longer
  /// match the checksums taken at registration (pager_config::verify_page_ins); htp::cuda_error if
  /// the copy out of HBM fails.
  void copy_to_host(tensor_handle h, void* dst);
  /// Blocks until every copy the pager started has completed and been accounted.
  /// @throws htp::cuda_error (htp::logic_error on sim) if waiting on the device fails; a failed
  /// copy is accounted (the tensor stays where it was), not thrown.
  void synchronize();

  /// The tensor's state now. @throws htp::invalid_argument for a stale handle.
  tensor_info info(tensor_handle h) const;
  /// A snapshot of the metrics (see metrics.hpp). Thread-safe.
  /// @throws htp::cuda_error (htp::logic_error on sim) only after a sticky device failure, which
  /// accounting the finished copies runs into; nothing else.
  pager_metrics metrics() const;
  /// Starts the pager's counters, fault waits, latency histogram and occupancy mean and peak
  /// afresh (e.g. between warm-up and timed steps), so the next metrics() covers only what came
  /// after; the trace (with `trace = true`) starts afresh too. Tensors and residency are
  /// untouched; the transfer engine's counters (`transfers`) are not reset. Copies in flight
  /// when it is called count in neither period's samples exactly: call synchronize() first for
  /// a clean cut. Thread-safe.
  /// @throws htp::cuda_error (htp::logic_error on sim) only after a sticky device failure, which
  /// accounting the finished copies runs into; nothing else.
  void reset_metrics();
  /// With `trace = true`, adds a span named `name` to the trace's compute track: work the caller
  /// timed on the device (a kernel), in host steady-clock time, so the timeline shows the GPU's
  /// compute next to htp's copies. The pager's own host view of each tensor (first acquire to last
  /// release) is a track of its own. Thread-safe; does nothing when tracing is off.
  /// Never throws.
  void trace_compute_span(const std::string& name, std::chrono::steady_clock::time_point begin,
                          std::chrono::steady_clock::time_point end);
  /// Writes the event trace (Chrome / Perfetto JSON, one track per stream) to `path`.
  /// @throws htp::invalid_argument if tracing is off or the file cannot be created;
  /// htp::io_error if writing it fails (the path and the system's reason).
  void write_trace(const std::string& path) const;

  /// The transfer engine (its prefetch and reduction streams, rate settings, metrics).
  transfer_engine& engine() noexcept;
  const pager_config& config() const noexcept;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace htp
