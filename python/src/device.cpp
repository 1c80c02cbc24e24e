// htp.Device and htp._htp.make_device: a backend chosen by name, never silently.
#include "bindings.hpp"

#include <htp/error.hpp>
#include <htp/sim_device.hpp>

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

namespace htp::python {
namespace {

std::shared_ptr<py_device> make_py_device(const std::string& backend_name, int ordinal,
                                          const sim_config& sim) {
  auto d = std::make_shared<py_device>();
  d->ordinal = backend_name == "sim" ? 0 : ordinal;
  nb::gil_scoped_release unlocked;  // cuda initialisation can take seconds
  if (backend_name == "sim") {
    d->dev = make_sim_device(sim);
  } else if (backend_name == "cuda") {
    d->dev = make_device(backend::cuda, ordinal);
  } else if (backend_name == "auto") {
    d->dev = make_device(backend::cuda_or_sim, ordinal);
  } else {
    throw htp::invalid_argument("make_device: backend '" + backend_name +
                                "' is none of 'auto' (cuda when a GPU is usable, else sim), "
                                "'cuda' or 'sim'");
  }
  d->backend = d->dev->properties().kind == backend::cuda ? "cuda" : "sim";
  d->ordinal = d->dev->properties().ordinal;
  return d;
}

void bind_sim_config(nb::module_& m) {
  nb::class_<sim_config>(m, "SimConfig", "Options of a sim device (htp/sim_device.hpp).")
      .def(nb::init<>())
      .def_rw("device_memory_bytes", &sim_config::device_memory_bytes)
      .def_rw("pinned_memory_bytes", &sim_config::pinned_memory_bytes)
      .def_rw("h2d_bytes_per_second", &sim_config::h2d_bytes_per_second)
      .def_rw("d2h_bytes_per_second", &sim_config::d2h_bytes_per_second)
      .def_rw("copy_latency_ns", &sim_config::copy_latency_ns)
      .def_rw("copy_engines", &sim_config::copy_engines)
      .def_rw("poison_byte", &sim_config::poison_byte)
      .def_rw("timing_only", &sim_config::timing_only);
}

}  // namespace

void bind_device(nb::module_& m) {
  bind_sim_config(m);
  nb::class_<py_device>(m, "Device",
                        "A GPU (cuda) or its CPU emulation (sim). Make one with "
                        "htp.make_device; pagers keep it alive.")
      .def_prop_ro(
          "backend", [](const py_device& d) { return d.backend; }, "'cuda' or 'sim'.")
      .def_prop_ro("ordinal", [](const py_device& d) { return d.ordinal; })
      .def_prop_ro("name", [](const py_device& d) { return d.dev->properties().name; })
      .def_prop_ro(
          "total_memory", [](const py_device& d) { return d.dev->properties().total_memory; },
          "Bytes of device memory.")
      .def_prop_ro(
          "timing_only", [](const py_device& d) { return d.dev->properties().timing_only; },
          "A sim device that stores no bytes (see SimConfig.timing_only).")
      .def_prop_ro(
          "sim_pinned_bytes", [](const py_device& d) { return sim_pinned_bytes_in_use(*d.dev); },
          "sim only: bytes of pinned host memory allocated now (tests of what htp holds).")
      .def(
          "synchronize", [](py_device& d) { d.dev->synchronize_all(); },
          nb::call_guard<nb::gil_scoped_release>(),
          "Blocks until all work on every stream of this device has completed.")
      .def("__repr__", [](const py_device& d) {
        return "<htp.Device " + d.backend + ":" + std::to_string(d.ordinal) + " '" +
               d.dev->properties().name + "'>";
      });
  m.def(
      "make_device",
      [](const std::string& backend, int ordinal, nb::kwargs sim) {
        if (nb::len(sim) != 0 && backend != "sim") {
          std::string names;
          for (auto [key, value] : sim)
            names += (names.empty() ? "" : ", ") + nb::cast<std::string>(key);
          throw htp::invalid_argument("make_device: " + names +
                                      " configure a sim device; pass backend='sim'");
        }
        const sim_config config =
            nb::cast<sim_config>(configure(nb::cast(sim_config{}), sim, "SimConfig"));
        return make_py_device(backend, ordinal, config);
      },
      nb::arg("backend") = "auto", nb::arg("ordinal") = 0, nb::arg("sim"),
      "A device: 'auto' (cuda when a GPU is usable, else sim, with a warning logged), 'cuda' "
      "(raises CudaError when it cannot run, saying why) or 'sim'. Keyword arguments are "
      "SimConfig fields (device_memory_bytes=\"8GiB\", h2d_bytes_per_second=...), for sim only. "
      "Thread-safe.");
  m.def(
      "cuda_device_count", []() { return cuda_device_count(); },
      "GPUs visible to htp's CUDA runtime (0 without a driver or a CUDA build).");
}

}  // namespace htp::python
