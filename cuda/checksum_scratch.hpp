// Device scratch for the checksum kernel: one slot per stream that has run a checksum, taken from
// chunks allocated once (the first at device creation) and kept until the device is destroyed, so
// a checksum never allocates or frees device memory (cudaMallocAsync/cudaFreeAsync per call would
// touch the stream-ordered pool on every acquire of an integrity run). Included only by
// cuda_device.hpp.
#pragma once

#include "cuda_kernels.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace htp::cuda {

/// Per-stream checksum slots. Thread-safe. The device's ordinal must be current (device_guard)
/// around reserve() and slot_for(); free_all() runs with it current too.
class checksum_scratch_pool {
 public:
  /// Slots per chunk: 1024 streams at 16 bytes each, one small allocation.
  static constexpr std::size_t chunk_slots = 1024;

  checksum_scratch_pool() = default;
  checksum_scratch_pool(const checksum_scratch_pool&) = delete;
  checksum_scratch_pool& operator=(const checksum_scratch_pool&) = delete;

  /// Allocates the first chunk now (at device creation, so later free-memory readings include it).
  /// @throws htp::out_of_memory / htp::cuda_error if the driver fails.
  void reserve() {
    std::lock_guard lock(mutex_);
    if (free_.empty()) add_chunk();
  }

  /// The slot of stream `s`, assigned on its first checksum. Free slots are always zero (chunks
  /// are zeroed when added; the kernel leaves a slot zeroed after each use), so this enqueues
  /// nothing on `s`: no call here can block behind a caller's full stream queue.
  checksum_slot* slot_for(cudaStream_t s) {
    std::lock_guard lock(mutex_);
    if (auto it = by_stream_.find(s); it != by_stream_.end()) return it->second;
    if (free_.empty()) add_chunk();
    checksum_slot* slot = free_.back();
    free_.pop_back();
    by_stream_.emplace(s, slot);
    return slot;
  }

  /// Returns the slot of `s` (after the stream has drained, before it is destroyed). Never throws.
  void release(cudaStream_t s) noexcept {
    std::lock_guard lock(mutex_);
    if (auto it = by_stream_.find(s); it != by_stream_.end()) {
      free_.push_back(it->second);
      by_stream_.erase(it);
    }
  }

  /// A slot for one kernel captured into a graph: fixed in the graph, so it must be used by no
  /// other kernel while the graph exists (the graph's replays run one at a time, and its kernels
  /// each have their own). Taken from the free slots; the chunk that runs out is never added here
  /// (an allocation would invalidate the capture), so a capture that needs more slots than are
  /// free is refused. @throws htp::out_of_memory when no free slot is left.
  checksum_slot* take_for_graph() {
    std::lock_guard lock(mutex_);
    if (free_.empty()) {
      throw out_of_memory("cuda device: no free checksum scratch slot for a captured checksum (" +
                              std::to_string(chunks_.size() * chunk_slots) +
                              " in use); destroy graphs no longer needed",
                          sizeof(checksum_slot));
    }
    checksum_slot* slot = free_.back();
    free_.pop_back();
    return slot;
  }

  /// Returns slots of graph kernels that never ran (a capture that failed). Never throws.
  void give_back(const std::vector<checksum_slot*>& slots) noexcept {
    std::lock_guard lock(mutex_);
    free_.insert(free_.end(), slots.begin(), slots.end());
  }

  /// Retires the slots of a destroyed graph: a replay may still be running (cudaGraphExecDestroy
  /// does not wait), so they become free only at reclaim_retired(). Never throws.
  void retire(const std::vector<checksum_slot*>& slots) noexcept {
    std::lock_guard lock(mutex_);
    retired_.insert(retired_.end(), slots.begin(), slots.end());
  }

  /// Frees retired slots; call once the whole device is idle (after cudaDeviceSynchronize).
  void reclaim_retired() noexcept {
    std::lock_guard lock(mutex_);
    free_.insert(free_.end(), retired_.begin(), retired_.end());
    retired_.clear();
  }

  /// Frees every chunk; statuses are ignored (the runtime may be shutting down). Never throws.
  void free_all() noexcept {
    std::lock_guard lock(mutex_);
    for (void* c : chunks_) (void)cudaFree(c);
    chunks_.clear();
    free_.clear();
    retired_.clear();
    by_stream_.clear();
  }

 private:
  /// Allocates a chunk and zeroes it on a private stream, waiting for that (the first chunk at
  /// device creation, so the process's first memset happens there, not behind a parked stream).
  void add_chunk() {
    void* p = nullptr;
    HTP_CUDA_TRY(cudaMalloc(&p, chunk_slots * sizeof(checksum_slot)));
    cudaStream_t s = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
      e = cudaMemsetAsync(p, 0, chunk_slots * sizeof(checksum_slot), s);
      const cudaError_t w = e == cudaSuccess ? cudaStreamSynchronize(s) : e;
      (void)cudaStreamDestroy(s);
      e = w;
    }
    if (e != cudaSuccess) {
      (void)cudaFree(p);
      HTP_CUDA_TRY(e);
    }
    chunks_.push_back(p);
    auto* slots = static_cast<checksum_slot*>(p);
    for (std::size_t i = chunk_slots; i-- > 0;) free_.push_back(slots + i);
  }

  std::mutex mutex_;
  std::vector<void*> chunks_;
  std::vector<checksum_slot*> free_;
  std::map<cudaStream_t, checksum_slot*> by_stream_;
  std::vector<checksum_slot*> retired_;  // slots of destroyed graphs, until the device is idle
};

}  // namespace htp::cuda
