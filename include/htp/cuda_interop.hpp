// Interop with a program that drives CUDA itself: its own cudaStream_t / cudaEvent_t used where
// htp takes a stream_ref / event_ref, the native handle of one of htp's back, and a cuda device for
// a GPU the program has already initialised. The only public header that includes a CUDA header:
// include it from code built with the CUDA toolkit; everything else of htp compiles without it.
//
// Rules the program keeps:
//  - A wrapped stream or event stays the program's: htp never destroys it, and the program must not
//    destroy it while htp still uses it (e.g. until pager.release(h, stream) has been followed by
//    the stream's work completing, or the pager is synchronised).
//  - Streams are per device: pass a stream of the GPU the htp::device was made for.
//  - The legacy default stream (0 or cudaStreamLegacy) cannot be wrapped (its implicit
//    synchronisation with every blocking stream would serialise htp's copy streams), nor can
//    cudaStreamPerThread (one handle for a different real stream on every host thread: htp's
//    per-stream state would mix up threads, and HBM could be reused while another thread's kernels
//    still read it). Use a created stream.
//  - htp restores the calling thread's current device on return from every call (a scoped guard
//    around each CUDA call), so the program's cudaSetDevice state is never changed by htp.
//  - htp uses the device's primary context (the CUDA runtime's), the one the program's runtime
//    calls use too; memory and streams are shared with the program through it.
#pragma once

#include <htp/device.hpp>
#include <htp/error.hpp>

#include <cuda_runtime_api.h>

#include <memory>

namespace htp {

/// The program's stream as a stream_ref (non-owning). Thread-safe, no CUDA call.
/// @throws htp::invalid_argument for the legacy default stream (0, cudaStreamLegacy) and for
/// cudaStreamPerThread; the devices refuse them too.
inline stream_ref wrap_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    throw invalid_argument(
        s == cudaStreamPerThread
            ? "wrap_stream: cudaStreamPerThread is one handle for a different real stream on every "
              "host thread, so htp cannot order its memory by it; create a stream "
              "(cudaStreamCreateWithFlags(..., cudaStreamNonBlocking)) and wrap that"
            : "wrap_stream: the legacy default stream cannot be used with htp; create a stream "
              "(cudaStreamCreateWithFlags(..., cudaStreamNonBlocking)) and wrap that");
  }
  return stream_ref{static_cast<void*>(s)};
}

/// The cudaStream_t behind a stream_ref of a cuda device (htp's own streams included), for the
/// program's kernel launches. Meaningless for a sim device's refs. Thread-safe, no CUDA call.
inline cudaStream_t native_stream(stream_ref s) noexcept {
  return static_cast<cudaStream_t>(s.native);
}

/// The program's event as an event_ref (non-owning). Thread-safe, no CUDA call.
/// @throws htp::invalid_argument for a null event.
inline event_ref wrap_event(cudaEvent_t e) {
  if (e == nullptr) throw invalid_argument("wrap_event: null cudaEvent_t");
  return event_ref{static_cast<void*>(e)};
}

/// The cudaEvent_t behind an event_ref of a cuda device. Thread-safe, no CUDA call.
inline cudaEvent_t native_event(event_ref e) noexcept { return static_cast<cudaEvent_t>(e.native); }

/// A cuda device for GPU `ordinal`, which the program may already have initialised (made current,
/// allocated on, created streams on): htp joins its primary context and leaves the thread's current
/// device as it was. Unlike make_device it never falls back and logs nothing. Thread-safe.
/// @throws htp::cuda_error if the cuda backend cannot run here (reason and remedy in the message);
/// htp::invalid_argument if there is no GPU `ordinal`.
std::unique_ptr<device> make_cuda_device(int ordinal);

}  // namespace htp
