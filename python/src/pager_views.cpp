// acquire and release from Python: the stream the caller named, the views as DLPack tensors
// (kDLCUDA on cuda, kDLCPU on sim) that point into the pager's HBM extents without a copy.
#include "bindings.hpp"
#include "streams.hpp"

#include <nanobind/stl/optional.h>

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

nb::list acquire_views(pager_state& self, const std::vector<py_tensor>& ts,
                       std::optional<std::uintptr_t> raw, bool wait) {
  const std::vector<tensor_handle> hs = handles_of(ts);
  const stream_binder::target target = self.streams->resolve(raw);
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
  nb::list views;
  const std::shared_ptr<pager_state> owner = self.shared_from_this();
  for (std::size_t i = 0; i < ts.size(); ++i) views.append(nb::cast(view(owner, ts[i], spans[i])));
  return views;
}

void release_views(pager_state& self, const std::vector<py_tensor>& ts,
                   std::optional<std::uintptr_t> raw, bool dirty) {
  const std::vector<tensor_handle> hs = handles_of(ts);
  const stream_binder::target target = self.streams->resolve(raw);
  nb::gil_scoped_release unlocked;
  self.streams->before_release(target);
  self.pager->release(hs, target.ref, dirty);
}

}  // namespace htp::python
