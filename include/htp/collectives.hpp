// Collectives over the GPUs of a node, on each GPU's reduction stream. See docs/multi_gpu.md.
//
// One interface, two implementations (and a trivial third for one GPU, make_one_rank_collectives):
//  - NCCL (make_nccl_collectives): the library every inference engine already runs. htp loads
//    libnccl.so.2 at run time (dlopen), so htp builds, links and runs without NCCL installed; only
//    these factories fail then, with htp::cuda_error saying so. Either htp makes the communicators
//    for the GPUs of this process (ncclCommInitAll), or the caller hands in its own ncclComm_t per
//    rank (wrap_nccl_comms), which is how an engine with its own communicator uses htp.
//  - sim (make_sim_collectives): threads and host copies across N sim devices, with an optional
//    modelled interconnect, so CI tests the scheduling.
//
// Contract of every call: rank r's call is enqueued on stream `s` of GPU r (stream order: it starts
// after the work queued on `s` before it, and work queued after it starts after it completes).
// Every rank makes the same calls in the same order with the same sizes. When one thread issues the
// calls of several ranks, it brackets them with group_start() / group_end() (NCCL's rule; a no-op
// on sim). Thread safety: different ranks may call from different threads concurrently.
//
// Failure: a collective completes only when every rank makes its call, so a rank that fails (its
// thread threw, its GPU died) would leave the others waiting forever. Whoever sees the failure
// calls abort(reason): every rank's collective already enqueued then completes without its result
// (its stream goes on), and every later call throws htp::logic_error naming the reason. An aborted
// object stays aborted; make a new one to run collectives again. The sim also aborts by itself
// when a rank waits at a collective longer than its rendezvous timeout (make_sim_collectives).
// See docs/gpu.md, "Collectives: abort, not hang".
#pragma once

#include <htp/device.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace htp {

/// Element types of a reduction.
enum class element_type { float32, bfloat16 };
std::size_t size_of(element_type t) noexcept;

class collectives {
 public:
  virtual ~collectives() = default;
  /// Ranks: one per GPU.
  virtual std::size_t size() const noexcept = 0;
  /// "nccl" or "sim". Never throws.
  virtual std::string backend_name() const = 0;
  /// Rank r's `bytes` at `send` land at recv + r * bytes on every rank (recv holds size() * bytes).
  /// @throws htp::invalid_argument for a bad rank, null buffers or a size mismatch between ranks;
  /// htp::logic_error once aborted (nothing enqueued); htp::cuda_error from NCCL (a call NCCL
  /// refuses, or a communicator with an asynchronous error, aborts the object first: the other
  /// ranks' matching calls could never complete).
  virtual void all_gather(std::size_t rank, const void* send, void* recv, std::size_t bytes,
                          stream_ref s) = 0;
  /// Element-wise sum of every rank's `count` elements at `send`, into `recv` on every rank
  /// (send == recv is allowed). @throws as all_gather.
  virtual void all_reduce_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                              element_type type, stream_ref s) = 0;
  /// Element-wise sum of every rank's `size() * count` elements at `send`, scattered: rank r
  /// receives block r of the sum (elements [r * count, (r + 1) * count)) at `recv`, `count`
  /// elements. In place is allowed as NCCL allows it: `recv` at block r of `send`; any other
  /// overlap is undefined. The ZeRO-2 gradient reduction: each rank keeps its shard's sum.
  /// @throws as all_gather.
  virtual void reduce_scatter_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                                  element_type type, stream_ref s) = 0;
  /// Brackets calls of several ranks issued by one thread. Call group_end after a successful
  /// group_start even when a call in between threw (NCCL keeps the group open otherwise, and an
  /// abort waits for open groups before it tears the communicators down).
  /// @throws group_start: htp::logic_error once aborted; both: htp::cuda_error from NCCL.
  virtual void group_start() = 0;
  /// Closes the bracket. @throws htp::cuda_error from NCCL.
  virtual void group_end() = 0;

  /// Aborts every rank's collectives, for good, after a failure; `reason` says what failed and is
  /// quoted by every later call's error. Collectives already enqueued complete without copying
  /// (sim: their waits return; NCCL: ncclCommAbort on every communicator, the caller's too for
  /// wrap_nccl_comms, which must then not be destroyed by the caller), so the ranks' streams go
  /// on; later calls throw htp::logic_error. Idempotent: the first reason is kept. Never blocks
  /// on another rank: a communicator a thread is inside an NCCL call on (or in an open group) is
  /// aborted when that call (or group_end) returns. Thread-safe; any thread may call it.
  virtual void abort(const std::string& reason) noexcept = 0;
  /// Whether abort() ran (called, or by the sim's rendezvous timeout, or after an NCCL failure).
  /// Thread-safe.
  virtual bool aborted() const noexcept = 0;
};

/// Collectives across sim devices (rank r = devices[r]). `interconnect_bytes_per_second` > 0
/// models each collective's time as (N - 1) / N x bytes per rank / rate, as a ring does; 0 = free.
/// On timing-only devices (sim_config::timing_only) nothing is copied or summed: only the modelled
/// time passes. `rendezvous_timeout`: a rank whose stream has waited this long at a collective for
/// ranks that have not arrived aborts the object, with a reason naming those ranks, so nothing
/// waits forever even when no one calls abort(); keep it well above the longest skew between the
/// ranks' streams. @throws htp::invalid_argument if devices is empty, holds a null or non-sim
/// device, or mixes timing-only devices with ones that store bytes, or the timeout is not > 0.
std::unique_ptr<collectives> make_sim_collectives(
    const std::vector<device*>& devices, std::uint64_t interconnect_bytes_per_second = 0,
    std::chrono::milliseconds rendezvous_timeout = std::chrono::seconds(120));

/// Collectives of one rank on `dev` (cuda or sim), which must outlive the result: an all-gather
/// or all-reduce is a device-to-device copy on the caller's stream (nothing when in place). For a
/// node of one GPU, so N-GPU code runs on one GPU without NCCL. No call waits for another rank,
/// so abort() only makes later calls throw (queued copies complete).
/// Never throws.
std::unique_ptr<collectives> make_one_rank_collectives(device& dev);

/// Whether libnccl.so.2 can be loaded here; `why` (if given) says why not.
/// Never throws.
bool nccl_available(std::string* why = nullptr);
/// NCCL communicators for these cuda devices of this process (ncclCommInitAll), owned by the
/// result: destroyed with it, or aborted by abort() (then never destroyed). abort() needs
/// ncclCommAbort (NCCL 2.4 or later); without it, later calls still throw but work already
/// enqueued is not interrupted, and the communicators are left to the process's exit. @throws
/// htp::cuda_error if NCCL cannot be loaded or fails (the message says which);
/// htp::invalid_argument for a non-cuda device.
std::unique_ptr<collectives> make_nccl_collectives(const std::vector<device*>& devices);
/// The caller's own communicators (ncclComm_t, one per rank, in rank order), not owned: they must
/// outlive the result. abort() aborts them (ncclCommAbort frees them: the caller must not destroy
/// them afterwards; aborted() says whether it happened). @throws htp::cuda_error if NCCL cannot be
/// loaded; invalid_argument for a null communicator.
std::unique_ptr<collectives> wrap_nccl_comms(const std::vector<void*>& nccl_comms);

// ---- One rank per process (vLLM, SGLang, torchrun workers) ----
// Each process is one rank of a world of `world_size` ranks. The object's size() is the world
// size, and every call takes this process's own rank (another rank is invalid_argument). The
// calls keep the contract above: stream order on `s`, the same calls in the same order on every
// rank, and abort() on failure. A rank that dies, or aborts, makes the other ranks' calls fail
// within a bounded time (NCCL: the caller's watchdog aborts the communicator, as engines do; sim:
// the rendezvous notices the dead process or the timeout).

/// NCCL's unique id (ncclGetUniqueId, 128 bytes) for make_nccl_rank_collectives: rank 0 makes it
/// and the engine broadcasts it (torch.distributed, a file, the launcher's environment).
/// @throws htp::cuda_error if NCCL cannot be loaded or fails.
std::vector<std::uint8_t> nccl_unique_id();
/// This process's rank of a new NCCL communicator (ncclCommInitRank on `dev`, a cuda device) from
/// the id rank 0 made, with `dev`'s GPU current for the call (the caller's current device is kept);
/// owned by the result (destroyed with it, or aborted by abort()). Blocks
/// until every rank has joined (NCCL's rule). @throws htp::invalid_argument for an id that is not
/// 128 bytes, rank >= world_size, world_size == 0 or a non-cuda device; htp::cuda_error from
/// NCCL.
std::unique_ptr<collectives> make_nccl_rank_collectives(const std::vector<std::uint8_t>& unique_id,
                                                        std::size_t rank, std::size_t world_size,
                                                        device& dev);
/// The engine's own communicator for this process (`nccl_comm`, an ncclComm_t of which this
/// process is `rank` of `world_size`), not owned: it must outlive the result. abort() aborts it
/// (ncclCommAbort frees it: the engine must not destroy it afterwards). @throws
/// htp::invalid_argument for a null communicator or rank >= world_size, or when NCCL reports
/// another rank or size for the communicator; htp::cuda_error if NCCL cannot be loaded.
std::unique_ptr<collectives> join_nccl_comm(void* nccl_comm, std::size_t rank,
                                            std::size_t world_size);
/// This process's rank of sim collectives across processes on one machine: a rendezvous in a
/// shared-memory segment named `name` (the ranks agree on it, as on an NCCL unique id; the
/// first rank to arrive makes it, the last to leave removes it). `dev` is this process's sim
/// device; each call is a host function on `s`. The segment is /dev/shm/htp-coll.<name>, with a
/// staging area per rank (16 MiB, or $HTP_SIM_RANK_STAGING_BYTES of the process that makes it):
/// a larger collective moves in pieces of that size, every rank in lockstep. Sums are computed in
/// float in rank order, so every rank gets the same bits. A rank whose process dies, or that waits
/// at a collective longer than `rendezvous_timeout`, aborts the world: every rank's pending and
/// later calls fail (pending ones complete without their result, later ones throw logic_error
/// naming the reason). @throws htp::invalid_argument for a bad name, rank >= world_size, no
/// ranks, a timeout not > 0 or a non-sim device; htp::logic_error if the ranks do not all join
/// within `rendezvous_timeout`, or a segment of this name has another world size; htp::io_error if
/// a system call fails.
std::unique_ptr<collectives> make_sim_rank_collectives(
    const std::string& name, std::size_t rank, std::size_t world_size, device& dev,
    std::chrono::milliseconds rendezvous_timeout = std::chrono::seconds(60));

}  // namespace htp
