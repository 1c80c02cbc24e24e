// How a Python caller's stream argument becomes the stream htp orders an acquire or release on.
//  - None: the pager's own stream, and acquires block the host until the bytes are there, so the
//    view is usable by anything (numpy, torch on the CPU, a kernel on any stream).
//  - an int on cuda: a cudaStream_t (torch.cuda.Stream.cuda_stream). 0 and 1 are the legacy default
//    stream, which htp refuses in C++; the binding bridges it through its own stream with events
//    (legacy waits for the acquire; the release waits for the legacy stream's work so far).
//  - an int on sim: refused (sim streams are not caller objects).
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
  /// The target for the caller's argument (see the file comment). Thread-safe.
  /// @throws htp::invalid_argument for an int on sim or cudaStreamPerThread (2).
  target resolve(std::optional<std::uintptr_t> raw) const;
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
