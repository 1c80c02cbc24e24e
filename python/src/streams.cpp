#include "streams.hpp"

#include <htp/error.hpp>

#include <nanobind/stl/string.h>

#include <optional>

namespace htp::python {

stream_binder::stream_binder(py_device& dev) : dev_(dev), own_(dev.dev->create_stream()) {
  if (dev.is_cuda()) bridge_ = make_legacy_bridge();
}

stream_binder::~stream_binder() { dev_.dev->destroy_stream(own_); }

stream_binder::target stream_binder::resolve(nb::handle stream) const {
  std::optional<std::uintptr_t> raw;
  const auto handle_of = [&](nb::handle h) {
    std::uintptr_t v = 0;
    if (!nb::isinstance<nb::int_>(h) || PyBool_Check(h.ptr()) || !nb::try_cast(h, v, false)) {
      return false;
    }
    raw = v;
    return true;
  };
  if (stream.is_none()) {
    if (dev_.is_cuda()) {
      const nb::object torch = nb::module_::import_("sys").attr("modules").attr("get")("torch");
      if (!torch.is_none() && nb::cast<bool>(torch.attr("cuda").attr("is_available")())) {
        handle_of(torch.attr("cuda").attr("current_stream")(dev_.ordinal).attr("cuda_stream"));
      }
    }
  } else if (PyBool_Check(stream.ptr())) {
    throw htp::invalid_argument("stream: pass a torch.cuda.Stream, a cudaStream_t int or None");
  } else if (!handle_of(stream)) {
    bool found = false;
    for (const char* attr : {"cuda_stream", "ptr"}) {  // torch.cuda.Stream, cupy.cuda.Stream
      if (!found && nb::hasattr(stream, attr)) found = handle_of(stream.attr(attr));
    }
    if (!found) {
      throw htp::invalid_argument(
          "stream: " + nb::cast<std::string>(stream.type().attr("__name__")) +
          " is not a stream; pass a torch.cuda.Stream, a cudaStream_t int or None (torch's "
          "current stream)");
    }
  }
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
