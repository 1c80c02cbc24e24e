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
// after the work queued on `s` before it, and work queued after it starts after it completes). Every
// rank makes the same calls in the same order with the same sizes. When one thread issues the calls
// of several ranks, it brackets them with group_start() / group_end() (NCCL's rule; a no-op on sim).
// Thread safety: different ranks may call from different threads concurrently.
#pragma once

#include <htp/device.hpp>

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
  /// "nccl" or "sim".
  virtual std::string backend_name() const = 0;
  /// Rank r's `bytes` at `send` land at recv + r * bytes on every rank (recv holds size() * bytes).
  /// @throws htp::invalid_argument for a bad rank, null buffers or a size mismatch between ranks;
  /// htp::cuda_error from NCCL.
  virtual void all_gather(std::size_t rank, const void* send, void* recv, std::size_t bytes,
                          stream_ref s) = 0;
  /// Element-wise sum of every rank's `count` elements at `send`, into `recv` on every rank
  /// (send == recv is allowed). @throws as all_gather.
  virtual void all_reduce_sum(std::size_t rank, const void* send, void* recv, std::size_t count,
                              element_type type, stream_ref s) = 0;
  /// Brackets calls of several ranks issued by one thread.
  virtual void group_start() = 0;
  virtual void group_end() = 0;
};

/// Collectives across sim devices (rank r = devices[r]). `interconnect_bytes_per_second` > 0
/// models each collective's time as (N - 1) / N x bytes per rank / rate, as a ring does; 0 = free.
/// On timing-only devices (sim_config::timing_only) nothing is copied or summed: only the modelled
/// time passes. @throws htp::invalid_argument if devices is empty, holds a null or non-sim
/// device, or mixes timing-only devices with ones that store bytes.
std::unique_ptr<collectives> make_sim_collectives(const std::vector<device*>& devices,
                                                  std::uint64_t interconnect_bytes_per_second = 0);

/// Collectives of one rank on `dev` (cuda or sim), which must outlive the result: an all-gather
/// or all-reduce is a device-to-device copy on the caller's stream (nothing when in place). For a
/// node of one GPU, so N-GPU code runs on one GPU without NCCL.
std::unique_ptr<collectives> make_one_rank_collectives(device& dev);

/// Whether libnccl.so.2 can be loaded here; `why` (if given) says why not.
bool nccl_available(std::string* why = nullptr);
/// NCCL communicators for these cuda devices of this process (ncclCommInitAll), owned by the
/// result. @throws htp::cuda_error if NCCL cannot be loaded or fails (the message says which);
/// htp::invalid_argument for a non-cuda device.
std::unique_ptr<collectives> make_nccl_collectives(const std::vector<device*>& devices);
/// The caller's own communicators (ncclComm_t, one per rank, in rank order), not owned: they must
/// outlive the result. @throws htp::cuda_error if NCCL cannot be loaded; invalid_argument for a
/// null communicator.
std::unique_ptr<collectives> wrap_nccl_comms(const std::vector<void*>& nccl_comms);

}  // namespace htp
