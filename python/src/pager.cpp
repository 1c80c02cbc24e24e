// htp._htp.Pager: registration, the pager's calls and its reports, for the Python wrapper
// (python/htp/_pager.py), which resolves streams and takes every config field by name.
#include "bindings.hpp"
#include "streams.hpp"

#include <htp/companion.hpp>
#include <htp/error.hpp>
#include <htp/prometheus.hpp>
#include <htp/tensor_file.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>

namespace htp::python {

pager_state::pager_state(std::shared_ptr<py_device> d, std::unique_ptr<htp::pager> p)
    : device(std::move(d)), owned(std::move(p)), pager(owned.get()),
      streams(std::make_unique<stream_binder>(*device)) {}

pager_state::pager_state(std::shared_ptr<py_device> d, std::shared_ptr<void> node_owner,
                         htp::pager& p)
    : device(std::move(d)), owner(std::move(node_owner)), pager(&p),
      streams(std::make_unique<stream_binder>(*device)) {}

pager_state::~pager_state() {
  {
    // The pager waits for its copies and drops its tensors before the caller memory they may
    // live in (keep_alive) is let go.
    nb::gil_scoped_release unlocked;
    if (owned) owned.reset();
    streams.reset();
  }
  keep_alive.clear();
}

host_array host_array_of(const nb::ndarray<nb::ro>& a, const std::string& name) {
  if (a.device_type() != nb::device::cpu::value) {
    throw htp::invalid_argument("register '" + name +
                                "': the source is not in CPU memory; "
                                "pass a CPU tensor or array (tensor.cpu()) as the host copy");
  }
  host_array h{const_cast<void*>(a.data()), a.nbytes(), a.dtype(), {}};
  std::int64_t expected = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) {
      throw htp::invalid_argument("register '" + name +
                                  "': the source is not C-contiguous; "
                                  "pass tensor.contiguous() or numpy.ascontiguousarray(a)");
    }
    expected *= static_cast<std::int64_t>(a.shape(i));
  }
  for (std::size_t i = 0; i < a.ndim(); ++i) h.shape.push_back(a.shape(i));
  dtype_name(h.dtype);  // refuses what a view could not describe
  if (h.bytes == 0) throw htp::invalid_argument("register '" + name + "': the source has no bytes");
  return h;
}

namespace {

py_tensor tensor_of(tensor_handle h, std::string name, const host_array& a, tensor_kind kind) {
  return py_tensor{h, std::move(name), a.dtype, a.shape, a.bytes, kind};
}

py_tensor register_copy(pager_state& s, std::string name, const nb::ndarray<nb::ro>& src,
                        tensor_kind kind) {
  const host_array a = host_array_of(src, name);
  tensor_handle h;
  {
    nb::gil_scoped_release unlocked;
    h = s.pager->register_tensor(name, a.bytes, kind, a.data);
  }
  return tensor_of(h, std::move(name), a, kind);
}

// The kind of region to lend for caller memory: pinned when the device maps it already (a pinned
// torch tensor on cuda), otherwise registered by htp.
host_region_kind region_kind_of(pager_state& s, const host_array& a, bool read_only) {
  try {
    s.device->dev->mapped_device_pointer(a.data);
    s.device->dev->mapped_device_pointer(static_cast<char*>(a.data) + a.bytes - 1);
    return host_region_kind::pinned;
  } catch (const htp::invalid_argument&) {
    return read_only ? host_region_kind::pageable_read_only : host_region_kind::pageable;
  }
}

py_tensor register_at(pager_state& s, std::string name, const nb::ndarray<nb::ro>& src,
                      tensor_kind kind, bool read_only, bool lend, nb::object keep) {
  const host_array a = host_array_of(src, name);
  tensor_handle h;
  {
    nb::gil_scoped_release unlocked;
    if (lend) s.pager->add_host_region(a.data, a.bytes, region_kind_of(s, a, read_only));
    try {
      h = s.pager->register_tensor_at(name, a.bytes, kind, a.data);
    } catch (...) {
      if (lend) s.pager->remove_host_region(a.data);
      throw;
    }
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.keep_alive.emplace(key_of(h), std::move(keep));
  if (lend) s.own_regions.emplace(key_of(h), a.data);
  return tensor_of(h, std::move(name), a, kind);
}

py_tensor register_file(pager_state& s, std::string name, const std::string& path,
                        std::uint64_t offset, const std::string& dtype,
                        const std::vector<std::size_t>& shape) {
  host_array a{nullptr, 0, dtype_from_name(dtype), shape};
  a.bytes = a.dtype.bits / 8;
  for (std::size_t d : shape) a.bytes *= d;
  tensor_handle h;
  {
    nb::gil_scoped_release unlocked;
    h = s.pager->register_file_tensor(name, a.bytes, tensor_file::open(path), offset);
  }
  return tensor_of(h, std::move(name), a, tensor_kind::weight);
}

py_tensor register_compressed(pager_state& s, std::string name, const nb::ndarray<nb::ro>& src,
                              tensor_kind kind) {
  const host_array a = host_array_of(src, name);
  const weight_format f = weight_format_of(a.dtype, name);
  tensor_handle h;
  {
    nb::gil_scoped_release unlocked;  // encodes: a few hundred MB/s per core
    h = s.pager->register_tensor(name, a.bytes, kind, a.data, f);
  }
  return tensor_of(h, std::move(name), a, kind);
}

// Every tensor of a companion (or those named), by name, all or nothing.
nb::dict register_companion(pager_state& s, const std::string& path,
                            const std::vector<std::string>& names) {
  companion::index idx;
  std::map<std::string, tensor_handle> hs;
  {
    nb::gil_scoped_release unlocked;
    idx = companion::read_index(path);
    hs = companion::register_companion(*s.pager, path, idx, names);
  }
  nb::dict out;
  for (const auto& [name, h] : hs) {
    const companion::entry& e = idx.tensors.at(name);
    host_array a{nullptr, e.bytes, dtype_from_name(e.dtype), {}};
    for (std::int64_t d : e.shape) a.shape.push_back(static_cast<std::size_t>(d));
    out[nb::str(name.c_str())] = tensor_of(h, name, a, tensor_kind::weight);
  }
  return out;
}

nb::dict write_companion(const std::string& in, const std::string& out,
                         std::size_t pager_chunk_bytes, unsigned threads) {
  const std::size_t chunk = companion::codec_chunk_for(pager_chunk_bytes);
  if (chunk == 0) {
    throw htp::invalid_argument("write_companion: pager_chunk_bytes " +
                                std::to_string(pager_chunk_bytes) +
                                " leaves no room for a codec chunk; pass the pager's chunk_bytes");
  }
  companion::index idx;
  {
    nb::gil_scoped_release unlocked;
    idx = companion::write(in, out, chunk, threads);
  }
  std::size_t logical = 0, wire = 0;
  for (const auto& [name, e] : idx.tensors) {
    logical += e.bytes;
    wire += e.wire_bytes;
  }
  nb::dict d;
  d["tensors"] = idx.tensors.size();
  d["skipped"] = idx.skipped;
  d["logical_bytes"] = logical;
  d["wire_bytes"] = wire;
  d["chunk_bytes"] = idx.chunk_bytes;
  return d;
}

void unregister(pager_state& s, const py_tensor& t) {
  {
    nb::gil_scoped_release unlocked;
    s.pager->unregister_tensor(t.handle);
  }
  nb::object keep;  // dropped after the lock, with the GIL held
  std::lock_guard<std::mutex> lock(s.mutex);
  if (auto r = s.own_regions.find(key_of(t.handle)); r != s.own_regions.end()) {
    s.pager->remove_host_region(r->second);
    s.own_regions.erase(r);
  }
  if (auto k = s.keep_alive.find(key_of(t.handle)); k != s.keep_alive.end()) {
    keep = std::move(k->second);
    s.keep_alive.erase(k);
  }
}

void copy_to_host(pager_state& s, const py_tensor& t, nb::ndarray<nb::device::cpu> dst) {
  if (dst.nbytes() != t.nbytes) {
    throw htp::invalid_argument("copy_to_host '" + t.name + "': the destination has " +
                                std::to_string(dst.nbytes()) + " bytes; the tensor has " +
                                std::to_string(t.nbytes) + " bytes (pass out=None for a new one)");
  }
  nb::gil_scoped_release unlocked;
  s.pager->copy_to_host(t.handle, dst.data());
}

nb::dict info_of(pager_state& s, const py_tensor& t) {
  const tensor_info i = s.pager->info(t.handle);
  nb::dict d;
  d["name"] = i.name;
  d["bytes"] = i.bytes;
  d["where"] = to_string(i.where);
  d["pins"] = i.pins;
  d["dirty"] = i.dirty;
  d["degraded"] = i.degraded;
  d["copy_in_flight"] = i.copy_in_flight;
  d["device_resident"] = i.device_resident;
  return d;
}

void bind_tensor(nb::module_& m) {
  nb::class_<py_tensor>(m, "Tensor", "A registered tensor: the pager's handle, name, dtype, shape.")
      .def_ro("name", &py_tensor::name)
      .def_prop_ro(
          "dtype", [](const py_tensor& t) { return dtype_name(t.dtype); },
          "'float32', 'bfloat16', ...")
      .def_prop_ro("shape",
                   [](const py_tensor& t) {
                     nb::list l;
                     for (std::size_t d : t.shape) l.append(d);
                     return nb::tuple(l);
                   })
      .def_ro("nbytes", &py_tensor::nbytes)
      .def_ro("kind", &py_tensor::kind)
      .def_prop_ro(
          "handle",
          [](const py_tensor& t) { return nb::make_tuple(t.handle.index, t.handle.generation); },
          "(index, generation): stale once unregistered, even after the slot is reused.")
      .def("__eq__", [](const py_tensor& a, const py_tensor& b) { return a.handle == b.handle; })
      .def("__hash__", [](const py_tensor& t) { return key_of(t.handle); })
      .def("__repr__", [](const py_tensor& t) {
        return "<htp.Tensor '" + t.name + "' " + dtype_name(t.dtype) + " " +
               std::to_string(t.nbytes) + " bytes>";
      });
}

}  // namespace

void bind_pager(nb::module_& m) {
  bind_tensor(m);
  m.def("write_companion", &write_companion, nb::arg("source"), nb::arg("out"),
        nb::arg("pager_chunk_bytes"), nb::arg("threads"),
        "Writes the compressed companion of a safetensors file (htp/companion.hpp).");
  bind_view(m);
  using gil_free = nb::call_guard<nb::gil_scoped_release>;
  nb::class_<pager_state>(m, "Pager", "The C++ pager (pager.hpp); use htp.Pager, which wraps it.")
      .def(nb::new_([](std::shared_ptr<py_device> d, const pager_config& c) {
             std::unique_ptr<htp::pager> p;
             {
               nb::gil_scoped_release unlocked;  // reserves and pins both tiers: slow
               p = std::make_unique<htp::pager>(*d->dev, c);
             }
             return std::make_shared<pager_state>(std::move(d), std::move(p));
           }),
           nb::arg("device"), nb::arg("config"))
      .def_prop_ro("device", [](const pager_state& s) { return s.device; })
      .def("register_copy", &register_copy, nb::arg("name"), nb::arg("source"), nb::arg("kind"))
      .def("register_at", &register_at, nb::arg("name"), nb::arg("source"), nb::arg("kind"),
           nb::arg("read_only"), nb::arg("lend"), nb::arg("keep").none())
      .def("register_file", &register_file, nb::arg("name"), nb::arg("path"), nb::arg("offset"),
           nb::arg("dtype"), nb::arg("shape"))
      .def("register_compressed", &register_compressed, nb::arg("name"), nb::arg("source"),
           nb::arg("kind"))
      .def("register_companion", &register_companion, nb::arg("path"), nb::arg("names"))
      .def("register_safetensors", &register_safetensors, nb::arg("path"), nb::arg("names").none())
      .def("unregister", &unregister, nb::arg("tensor"))
      .def("acquire", &acquire_views, nb::arg("tensors"), nb::arg("stream").none(), nb::arg("wait"))
      .def("release", &release_views, nb::arg("tensors"), nb::arg("stream").none(),
           nb::arg("dirty"))
      .def(
          "lend",
          [](pager_state& s, std::uintptr_t ptr, std::size_t bytes, host_region_kind k) {
            s.pager->add_host_region(reinterpret_cast<void*>(ptr), bytes, k);
          },
          gil_free(), nb::arg("ptr"), nb::arg("bytes"), nb::arg("kind"))
      .def(
          "unlend",
          [](pager_state& s, std::uintptr_t ptr) {
            s.pager->remove_host_region(reinterpret_cast<void*>(ptr));
          },
          gil_free(), nb::arg("ptr"))
      .def(
          "prefetch", [](pager_state& s, const py_tensor& t) { s.pager->prefetch(t.handle); },
          gil_free(), nb::arg("tensor"))
      .def(
          "set_routed_group",
          [](pager_state& s, const py_tensor& anchor, const std::vector<py_tensor>& members,
             unsigned k) {
            const std::vector<tensor_handle> hs = handles_of(members);
            nb::gil_scoped_release unlocked;
            s.pager->set_routed_group(anchor.handle, hs, k);
          },
          nb::arg("anchor"), nb::arg("members"), nb::arg("k"))
      .def(
          "expect",
          [](pager_state& s, const std::vector<py_tensor>& ts) {
            const std::vector<tensor_handle> hs = handles_of(ts);
            nb::gil_scoped_release unlocked;
            s.pager->expect(hs);
          },
          nb::arg("tensors"))
      .def(
          "set_schedule",
          [](pager_state& s, const std::vector<py_tensor>& ts, bool cyclic) {
            const std::vector<tensor_handle> hs = handles_of(ts);
            nb::gil_scoped_release unlocked;
            s.pager->set_schedule(hs, cyclic);
          },
          nb::arg("tensors"), nb::arg("cyclic"))
      .def(
          "evict", [](pager_state& s, const py_tensor& t) { s.pager->evict(t.handle); }, gil_free(),
          nb::arg("tensor"))
      .def(
          "compact", [](pager_state& s) { return s.pager->compact(); }, gil_free())
      .def("copy_to_host", &copy_to_host, nb::arg("tensor"), nb::arg("out"))
      .def(
          "synchronize", [](pager_state& s) { s.pager->synchronize(); }, gil_free())
      .def("info", &info_of, nb::arg("tensor"))
      .def("metrics_json", [](const pager_state& s) { return to_json(s.pager->metrics()); })
      .def("prometheus", [](const pager_state& s) { return to_prometheus(s.pager->metrics()); })
      .def(
          "reset_metrics", [](pager_state& s) { s.pager->reset_metrics(); }, gil_free())
      .def(
          "write_trace",
          [](const pager_state& s, const std::string& path) { s.pager->write_trace(path); },
          gil_free(), nb::arg("path"))
      .def_prop_ro("config", [](const pager_state& s) { return s.pager->config(); });
}

}  // namespace htp::python
