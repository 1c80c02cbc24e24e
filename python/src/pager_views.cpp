// acquire and release from Python: the stream the caller named, the views as DLPack tensors
// (kDLCUDA on cuda, kDLCPU on sim) that point into the pager's HBM extents without a copy.
#include "bindings.hpp"
#include "streams.hpp"

#include <htp/error.hpp>

#include <nanobind/stl/string.h>

namespace htp::python {

view::view(std::shared_ptr<pager_state> owner, const py_tensor& t, const device_span& span)
    : owner_(std::move(owner)), tensor_(t), span_(span) {}

nb::object view::dlpack(nb::handle self) const {
  const py_device& dev = *owner_->device;
  const int type = dev.is_cuda() ? nb::device::cuda::value : nb::device::cpu::value;
  nb::ndarray<> a(span_.data, tensor_.shape.size(), tensor_.shape.data(), self, nullptr,
                  tensor_.dtype, type, dev.is_cuda() ? dev.ordinal : 0);
  return nb::cast(a, nb::rv_policy::reference);
}

nb::tuple view::dlpack_device() const {
  const py_device& dev = *owner_->device;
  return dev.is_cuda() ? nb::make_tuple(int(nb::device::cuda::value), dev.ordinal)
                       : nb::make_tuple(int(nb::device::cpu::value), 0);
}

void bind_view(nb::module_& m) {
  nb::class_<view>(m, "View",
                   "A zero-copy view of an acquired tensor for any DLPack consumer "
                   "(torch.from_dlpack, numpy.from_dlpack). Valid until its release.")
      .def(
          "__dlpack__",
          [](nb::handle self, nb::object, nb::object, nb::object, nb::object) {
            return nb::cast<const view&>(self).dlpack(self);
          },
          nb::arg("stream").none() = nb::none(), nb::arg("max_version").none() = nb::none(),
          nb::arg("dl_device").none() = nb::none(), nb::arg("copy").none() = nb::none(),
          "A DLPack capsule (a new one per call). The stream argument is ignored: htp ordered "
          "the acquire on the stream given to Pager.acquire.")
      .def("__dlpack_device__", &view::dlpack_device)
      .def_prop_ro("tensor", [](const view& v) { return v.tensor(); })
      .def_prop_ro(
          "data_ptr", [](const view& v) { return reinterpret_cast<std::uintptr_t>(v.span().data); },
          "The device address of the first byte.")
      .def_prop_ro("nbytes", [](const view& v) { return v.tensor().nbytes; })
      .def_prop_ro(
          "degraded", [](const view& v) { return v.span().degraded; },
          "Served from mapped pinned host memory (the out-of-memory ladder's last rung).");
}

nb::object acquire_views(pager_state& self, nb::handle tensors, nb::handle stream, bool wait) {
  bool single = false;
  const std::vector<py_tensor> ts = tensors_of(tensors, &single);
  const std::vector<tensor_handle> hs = handles_of(ts);
  const stream_binder::target target = self.streams->resolve(stream);
  std::vector<device_span> spans;
  {
    nb::gil_scoped_release unlocked;
    spans = self.pager->acquire(hs, target.ref, wait || target.host_wait);
    try {
      self.streams->after_acquire(target);
    } catch (...) {
      self.pager->release(hs, target.ref);
      throw;
    }
  }
  const std::shared_ptr<pager_state> owner = self.shared_from_this();
  if (single) return nb::cast(view(owner, ts[0], spans[0]));
  nb::list views;
  for (std::size_t i = 0; i < ts.size(); ++i) views.append(nb::cast(view(owner, ts[i], spans[i])));
  return views;
}

void release_views(pager_state& self, nb::handle tensors, nb::handle stream, bool dirty) {
  const std::vector<tensor_handle> hs = handles_of(tensors_of(tensors));
  const stream_binder::target target = self.streams->resolve(stream);
  nb::gil_scoped_release unlocked;
  self.streams->before_release(target);
  self.pager->release(hs, target.ref, dirty);
}

void release_last_use_view(pager_state& self, const py_tensor& tensor, nb::handle stream) {
  const stream_binder::target target = self.streams->resolve(stream);
  nb::gil_scoped_release unlocked;
  self.streams->before_release(target);
  self.pager->release_last_use(tensor.handle, target.ref);
}

namespace {

/// What Pager.acquired returns: acquires on __enter__ (after checking `dirty`: weights cannot be
/// dirty, so the exit's release cannot fail on it and leave the tensors pinned), releases on
/// __exit__, also on an error. The stream is resolved at each end, as acquire and release do.
struct acquired_scope {
  std::shared_ptr<pager_state> pager;
  nb::object tensors;
  nb::object stream;
  bool dirty = false;

  nb::object enter() {
    if (dirty) {
      for (const py_tensor& t : tensors_of(tensors)) {
        if (t.kind == tensor_kind::weight) {
          throw htp::invalid_argument("acquired('" + t.name +
                                      "', dirty=True): a weight is never dirty; register "
                                      "kernel-written tensors with kind='mutable'");
        }
      }
    }
    return acquire_views(*pager, tensors, stream, false);
  }
  void exit() { release_views(*pager, tensors, stream, dirty); }
};

}  // namespace

nb::object acquired(pager_state& self, nb::object tensors, nb::object stream, bool dirty) {
  return nb::cast(
      acquired_scope{self.shared_from_this(), std::move(tensors), std::move(stream), dirty});
}

void bind_acquired(nb::module_& m) {
  nb::class_<acquired_scope>(m, "Acquired",
                             "What Pager.acquired returns: `with pager.acquired(ts) as views:` "
                             "acquires on entry and releases on exit, also on an error.")
      .def("__enter__", &acquired_scope::enter,
           "Acquires the tensors; returns the view (a list of views for a list).")
      .def(
          "__exit__",
          [](acquired_scope& s, nb::handle, nb::handle, nb::handle) {
            s.exit();
            return false;
          },
          nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none(),
          "Releases the tensors on the stream given, dirty as given; never swallows an error.");
}

}  // namespace htp::python
