#include "streams.hpp"

#include <htp/error.hpp>

namespace htp::python {

stream_binder::stream_binder(py_device& dev) : dev_(dev), own_(dev.dev->create_stream()) {
  if (dev.is_cuda()) bridge_ = make_legacy_bridge();
}

stream_binder::~stream_binder() { dev_.dev->destroy_stream(own_); }

stream_binder::target stream_binder::resolve(std::optional<std::uintptr_t> raw) const {
  if (!raw) return {own_, true, false};
  if (!dev_.is_cuda()) {
    throw htp::invalid_argument(
        "htp: a sim device takes stream=None (its streams are htp's own); an int names a "
        "cudaStream_t, which only a cuda device has");
  }
  if (*raw == 0 || *raw == 1) {
    if (!bridge_) throw htp::logic_error("htp: a cuda device without the legacy-stream bridge");
    return {own_, false, true};
  }
  if (*raw == 2) {
    throw htp::invalid_argument(
        "htp: cudaStreamPerThread is a different stream on every thread, so htp cannot order its "
        "memory by it; pass torch.cuda.current_stream() or a stream you created");
  }
  return {stream_ref{reinterpret_cast<void*>(*raw)}, false, false};
}

void stream_binder::after_acquire(const target& t) {
  if (t.legacy) bridge_->legacy_waits_for(own_);
}

void stream_binder::before_release(const target& t) {
  if (t.legacy) bridge_->waits_for_legacy(own_);
}

#ifndef HTP_HAVE_CUDA
std::unique_ptr<legacy_bridge> make_legacy_bridge() { return nullptr; }
#endif

}  // namespace htp::python
