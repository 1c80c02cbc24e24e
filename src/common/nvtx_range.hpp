// NVTX ranges around htp's work (faults, prefetches, write-backs, compaction, collectives), so an
// Nsight Systems timeline names it. The calls go to cuda/nvtx.cpp (NVTX3, header-only, in the
// CUDA toolkit; a few nanoseconds when no tool is attached) or, without CUDA, to no-ops in
// src/device/no_cuda.cpp; no file here includes a CUDA header.
#pragma once

namespace htp::detail {

/// Pushes a range named `name` in htp's NVTX domain ("htp") on the calling thread. Never throws.
void nvtx_push(const char* name) noexcept;
/// Pops the calling thread's innermost htp range. Never throws.
void nvtx_pop() noexcept;

/// One NVTX range for a scope: pushed on construction, popped on destruction (same thread).
class nvtx_range {
 public:
  explicit nvtx_range(const char* name) noexcept { nvtx_push(name); }
  ~nvtx_range() { nvtx_pop(); }
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;
};

}  // namespace htp::detail
