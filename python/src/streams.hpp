// How a Python caller's stream argument becomes the stream htp orders an acquire or release on:
// stream_binder::resolve is the one place that reads it.
//  - None on cuda: torch's current stream on the pager's GPU when torch is imported and sees a GPU;
//    otherwise (and always on sim) the pager's own stream, and acquires block the host until the
//    bytes are there, so the view is usable by anything (numpy, torch on the CPU, any stream).
//  - a torch.cuda.Stream (its cuda_stream), a cupy stream (its ptr) or an int: a cudaStream_t.
//    0 and 1 are the legacy default stream, which htp refuses in C++; the binding bridges it
//    through its own stream with events (legacy waits for the acquire; the release waits for the
//    legacy stream's work so far). 2 (cudaStreamPerThread) is refused.
//  - anything on sim but None: refused (sim streams are not caller objects).
#pragma once

#include "bindings.hpp"

namespace htp::python {

/// Event joins between the legacy default stream and one htp stream (cuda only).
class legacy_bridge {
 public:
  virtual ~legacy_bridge() = default;
  /// Work queued on the legacy stream from now on waits for the work queued on `own` so far.
  virtual void legacy_waits_for(stream_ref own) = 0;
  /// Work queued on `own` from now on waits for the work queued on the legacy stream so far.
  virtual void waits_for_legacy(stream_ref own) = 0;
};
/// The cuda bridge (cuda_streams.cpp); null in a build without CUDA.
std::unique_ptr<legacy_bridge> make_legacy_bridge();

class stream_binder {
 public:
  /// Creates the pager's own stream on `dev`. `dev` must outlive the binder.
  explicit stream_binder(py_device& dev);
  ~stream_binder();
  stream_binder(const stream_binder&) = delete;
  stream_binder& operator=(const stream_binder&) = delete;

  struct target {
    stream_ref ref;          ///< what the pager is called with
    bool host_wait = false;  ///< acquire(..., wait = true)
    bool legacy = false;     ///< bridged from the legacy default stream
  };
  /// The target for the caller's stream argument (see the file comment). Call with the GIL held.
  /// Thread-safe. @throws htp::invalid_argument for what is not a stream, a stream on sim, or
  /// cudaStreamPerThread (2).
  target resolve(nb::handle stream) const;
  /// After the pager's acquire on t.ref: makes a legacy caller's stream wait for it. Thread-safe.
  void after_acquire(const target& t);
  /// Before the pager's release on t.ref: makes it wait for a legacy caller's work. Thread-safe.
  void before_release(const target& t);

 private:
  py_device& dev_;
  stream_ref own_;
  std::unique_ptr<legacy_bridge> bridge_;
};

}  // namespace htp::python
