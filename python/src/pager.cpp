// htp.Pager (htp._htp.Pager): registration, the pager's calls and its reports, each method defined
// once, with Python's conveniences (options by keyword, sizes as strings, kinds by name, one tensor
// or a list, torch streams, copy_to_host into a new tensor) handled here.
#include "bindings.hpp"
#include "streams.hpp"

#include <htp/companion.hpp>
#include <htp/error.hpp>
#include <htp/prometheus.hpp>
#include <htp/tensor_file.hpp>

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
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
  lent.clear();
}

nb::object exportable(nb::handle source) {
  if (nb::hasattr(source, "detach")) {
    const nb::object detach = source.attr("detach");
    if (PyCallable_Check(detach.ptr())) return detach();
  }
  return nb::borrow(source);
}

nb::ndarray<nb::ro> array_of(nb::handle source, const std::string& what) {
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(exportable(source), a)) {
    throw htp::invalid_argument(what + ": the source is not an array htp can read (a " +
                                nb::cast<std::string>(source.type().attr("__name__")) +
                                "); pass a torch tensor, a numpy array or an object with "
                                "__dlpack__ or the buffer protocol");
  }
  return a;
}

tensor_kind kind_of(nb::handle kind) {
  if (nb::isinstance<tensor_kind>(kind)) return nb::cast<tensor_kind>(kind);
  if (nb::isinstance<nb::str>(kind)) {
    const std::string k = nb::cast<std::string>(kind);
    if (k == "weight") return tensor_kind::weight;
    if (k == "mutable" || k == "mutable_state") return tensor_kind::mutable_state;
    if (k == "activation") return tensor_kind::activation;
  }
  throw htp::invalid_argument("kind " + repr_of(kind) +
                              " is none of 'weight', 'mutable', 'activation'");
}

std::vector<py_tensor> tensors_of(nb::handle tensors, bool* single) {
  if (single) *single = nb::isinstance<py_tensor>(tensors);
  if (nb::isinstance<py_tensor>(tensors)) return {nb::cast<py_tensor>(tensors)};
  std::vector<py_tensor> out;
  const auto refuse = [] {
    return htp::invalid_argument("pass an htp.Tensor or a list of them (from Pager.register)");
  };
  const nb::object it = nb::steal(PyObject_GetIter(tensors.ptr()));
  if (!it.is_valid()) {
    PyErr_Clear();
    throw refuse();
  }
  for (nb::handle t : nb::borrow<nb::iterator>(it)) {
    if (!nb::isinstance<py_tensor>(t)) throw refuse();
    out.push_back(nb::cast<py_tensor>(t));
  }
  return out;
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
    // An activation starts dead: the source gives its dtype and shape, not its bytes.
    h = s.pager->register_tensor(name, a.bytes, kind,
                                 kind == tensor_kind::activation ? nullptr : a.data);
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

// Pager.lend and Pager.unlend: the pager holds the region; `s.lent` holds the object until unlend.
void lend(pager_state& s, nb::object source, bool read_only) {
  const nb::ndarray<nb::ro> array = array_of(source, "lend");
  const host_array a = {const_cast<void*>(array.data()), array.nbytes(), {}, {}};
  if (a.bytes == 0) throw htp::invalid_argument("lend: the buffer has no bytes");
  const host_region_kind k = region_kind_of(s, a, read_only);
  {
    nb::gil_scoped_release unlocked;  // registering with the driver is slow
    s.pager->add_host_region(a.data, a.bytes, k);
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.lent[reinterpret_cast<std::uintptr_t>(a.data)] = std::move(source);
}

void unlend(pager_state& s, nb::handle source) {
  void* const data = const_cast<void*>(array_of(source, "unlend").data());
  {
    nb::gil_scoped_release unlocked;
    s.pager->remove_host_region(data);
  }
  nb::object keep;  // dropped after the lock, with the GIL held
  std::lock_guard<std::mutex> lock(s.mutex);
  if (auto it = s.lent.find(reinterpret_cast<std::uintptr_t>(data)); it != s.lent.end()) {
    keep = std::move(it->second);
    s.lent.erase(it);
  }
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
nb::dict register_companion(pager_state& s, const std::filesystem::path& file,
                            const std::optional<std::vector<std::string>>& chosen) {
  const std::string path = file.string();
  const std::vector<std::string> names = chosen.value_or(std::vector<std::string>{});
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

// The names a caller passes (any iterable of str), or none (None: all).
std::optional<std::vector<std::string>> names_of(nb::handle names) {
  if (names.is_none()) return std::nullopt;
  std::vector<std::string> out;
  for (nb::handle n : nb::iter(names)) out.push_back(nb::cast<std::string>(nb::str(n)));
  return out;
}

// Pager.register: the form `copy` and `compress` choose (see its doc string).
py_tensor register_any(pager_state& s, std::string name, nb::handle source, nb::handle kind,
                       bool copy, nb::handle read_only, bool compress) {
  const tensor_kind k = kind_of(kind);
  const std::string what = "register " + repr_of(nb::str(name.c_str()));
  if (compress && !copy) {
    throw htp::invalid_argument(what +
                                ": compress=True keeps a compressed copy; it cannot use the "
                                "source's memory (copy=False). Pass copy=True, or write a "
                                "companion file (htp.write_companion) and use register_companion");
  }
  const nb::ndarray<nb::ro> src = array_of(source, what);
  if (compress) return register_compressed(s, std::move(name), src, k);
  if (copy) return register_copy(s, std::move(name), src, k);
  bool ro = false;
  if (read_only.is_none()) {  // a numpy array that is not writeable (a memmap opened 'r')
    const nb::object flags = nb::getattr(source, "flags", nb::none());
    ro = !flags.is_none() && !nb::cast<bool>(flags.attr("writeable"));
  } else {
    ro = nb::cast<bool>(read_only);
  }
  const bool lent = s.pager->in_host_region(src.data(), src.nbytes());
  return register_at(s, std::move(name), src, k, ro, !lent, nb::borrow(source));
}

// A new torch tensor (numpy array without torch) of the tensor's dtype and shape.
nb::object empty_like(const py_tensor& t) {
  nb::list shape;
  for (std::size_t d : t.shape) shape.append(d);
  const std::string dtype = dtype_name(t.dtype);
  try {
    const nb::module_ torch = nb::module_::import_("torch");
    return torch.attr("empty")(nb::tuple(shape), nb::arg("dtype") = torch.attr(dtype.c_str()));
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_ImportError)) throw;
  }
  const nb::module_ numpy = nb::module_::import_("numpy");
  if (dtype == "bfloat16")
    return numpy.attr("empty")(t.nbytes, nb::arg("dtype") = numpy.attr("uint8"));
  return numpy.attr("empty")(nb::tuple(shape), nb::arg("dtype") = dtype.c_str());
}

nb::dict write_companion(const std::filesystem::path& in, const std::filesystem::path& out,
                         nb::handle pager_chunk_bytes, int threads) {
  const std::size_t pager_chunk = pager_chunk_bytes.is_none()
                                      ? pager_config{}.chunk_bytes
                                      : parse_bytes(pager_chunk_bytes, "pager_chunk_bytes");
  if (threads < 1) {
    throw htp::invalid_argument("write_companion: threads must be at least 1, not " +
                                std::to_string(threads));
  }
  const std::size_t chunk = companion::codec_chunk_for(pager_chunk);
  if (chunk == 0) {
    throw htp::invalid_argument("write_companion: pager_chunk_bytes " +
                                std::to_string(pager_chunk) +
                                " leaves no room for a codec chunk; pass the pager's chunk_bytes");
  }
  companion::index idx;
  {
    nb::gil_scoped_release unlocked;
    idx = companion::write(in.string(), out.string(), chunk, static_cast<unsigned>(threads));
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

nb::object copy_to_host(pager_state& s, const py_tensor& t, nb::handle out) {
  const nb::object target = out.is_none() ? empty_like(t) : nb::borrow(out);
  nb::ndarray<nb::device::cpu> dst;
  if (!nb::try_cast(exportable(target), dst)) {
    throw htp::invalid_argument("copy_to_host '" + t.name +
                                "': out is not a writable CPU array (pass out=None for a new one)");
  }
  if (dst.nbytes() != t.nbytes) {
    throw htp::invalid_argument("copy_to_host '" + t.name + "': the destination has " +
                                std::to_string(dst.nbytes()) + " bytes; the tensor has " +
                                std::to_string(t.nbytes) + " bytes (pass out=None for a new one)");
  }
  {
    nb::gil_scoped_release unlocked;
    s.pager->copy_to_host(t.handle, dst.data());
  }
  return target;
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
  d["dead"] = i.dead;
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

/// Pager: registering tensors, lending memory, unregistering.
void bind_pager_registration(nb::class_<pager_state>& cls) {
  using gil_free = nb::call_guard<nb::gil_scoped_release>;
  cls.def("register", &register_any, nb::arg("name"), nb::arg("source"), nb::arg("kind") = "weight",
          nb::arg("copy") = true, nb::arg("read_only").none() = nb::none(),
          nb::arg("compress") = false,
          nb::sig("def register(self, name: str, source: object, kind: str | TensorKind = "
                  "'weight', copy: bool = True, read_only: bool | None = None, "
                  "compress: bool = False) -> Tensor"),
          "Registers a tensor from a CPU torch tensor, numpy array, buffer or DLPack producer, "
          "keeping its dtype and shape.\n\n"
          "`copy=True`: its bytes are copied into htp's pinned tier (host_budget); the source may "
          "be dropped afterwards. `copy=False`: no copy; the source's memory is the tensor's host "
          "copy (a pinned torch tensor is used as it is; other memory is registered with the "
          "driver, read-only when `read_only` or when a numpy array is not writeable, e.g. a "
          "memmap opened 'r'). The pager keeps the source alive until unregister. Several tensors "
          "of one buffer: `lend` it first. `kind`: 'weight', 'mutable' (written back when "
          "evicted dirty) or 'activation' (a training step's saved tensor: the source gives only "
          "its dtype and shape; it starts dead, see release_last_use). `compress=True` (bfloat16, "
          "float16 or float32 weights, with "
          "`copy=True`): the bytes are entropy-coded now (a few hundred MB/s per core) and only "
          "the compressed bytes are kept; each page-in copies them and decodes on the GPU "
          "(docs/pager.md, \"Compressed weights\").\n\n"
          "Raises InvalidArgumentError (not an array, bad dtype, not contiguous, not CPU memory, "
          "too large for the HBM budget, compress with a mutable tensor, another dtype or "
          "copy=False), OutOfMemoryError (host tier full).")
      .def("lend", &lend, nb::arg("source"), nb::arg("read_only") = false,
           "Lends a whole CPU buffer (a numpy memmap of a checkpoint, a pinned torch tensor) so "
           "that several tensors inside it register with `copy=False`. Memory the device maps "
           "already (pinned) is used as it is; other memory is registered with the driver, "
           "read-only when `read_only`. The pager keeps `source` alive until `unlend`.")
      .def("unlend", &unlend, nb::arg("source"),
           "Takes back a buffer given to `lend` (no tensor may still live in it).")
      .def(
          "register_safetensors",
          [](pager_state& s, const std::filesystem::path& path, nb::handle names) {
            return register_safetensors(s, path.string(), names_of(names));
          },
          nb::arg("path"), nb::arg("names").none() = nb::none(),
          nb::sig("def register_safetensors(self, path: str | os.PathLike, "
                  "names: collections.abc.Iterable[str] | None = None) -> dict[str, Tensor]"),
          "Registers tensors of a `.safetensors` file as file-backed weights: no host copy; each "
          "page-in reads the file. The header is read and checked in C++ (offsets in order, "
          "inside the file, matching dtype x shape, no gap or overlap); no byte of the file "
          "passes through Python. `names`: all when None. Tensors with no elements are skipped. "
          "All or nothing: on an error none stays registered.\n\n"
          "Raises CorruptDataError (a header that breaks the format: the tensor and the field), "
          "IoError (the file cannot be read: the path), InvalidArgumentError (a name the file "
          "does not hold, a dtype views cannot describe, a tensor larger than the HBM budget).")
      .def(
          "register_companion",
          [](pager_state& s, const std::filesystem::path& path, nb::handle names) {
            return register_companion(s, path, names_of(names));
          },
          nb::arg("path"), nb::arg("names").none() = nb::none(),
          nb::sig("def register_companion(self, path: str | os.PathLike, "
                  "names: collections.abc.Iterable[str] | None = None) -> dict[str, Tensor]"),
          "Registers tensors of a compressed companion (htp.write_companion or htp-compress wrote "
          "it) as compressed file-backed weights: each is verified now, and each page-in reads "
          "its compressed bytes and decodes them on the GPU. `names`: all when None. All or "
          "nothing: on an error none stays registered.\n\n"
          "Raises InvalidArgumentError (not a companion, an unknown name, pieces larger than this "
          "pager's chunk_bytes), CorruptDataError (a truncated or malformed index, a sequence "
          "that fails its checks), IoError (the file cannot be read).")
      .def("register_file", &register_file, nb::arg("name"), nb::arg("path"), nb::arg("offset"),
           nb::arg("dtype"), nb::arg("shape"),
           "Registers one file-backed weight: `dtype` (a safetensors name such as 'F32' or a "
           "numpy one) x `shape` at byte `offset` of the file at `path`. register_safetensors "
           "reads these from a header. Raises InvalidArgumentError (an unknown dtype, a range "
           "past the end of the file), IoError (the file cannot be read).")
      .def("unregister", &unregister, nb::arg("tensor"),
           "Drops a tensor (it must not be acquired). A stale handle raises "
           "InvalidArgumentError.");
}

/// Pager: acquire and release, one tensor or a list (views on the device).
void bind_pager_access(nb::class_<pager_state>& cls) {
  using gil_free = nb::call_guard<nb::gil_scoped_release>;
  cls.def("acquire", &acquire_views, nb::arg("tensors"), nb::arg("stream").none() = nb::none(),
          nb::arg("wait") = false,
          nb::sig("def acquire(self, tensors: Tensor | collections.abc.Sequence[Tensor], stream: "
                  "object = None, "
                  "wait: bool = False) -> View | list[View]"),
          "Pages the tensor(s) in if needed and pins them; returns a zero-copy view (a list for "
          "a list), usable on `stream`: a torch.cuda.Stream, a raw cudaStream_t int, or None for "
          "torch's current stream on cuda (the host waits for the bytes when torch is not in "
          "use; on sim always). `wait`: the host waits for the bytes in any case. Turn a view "
          "into a tensor with torch.from_dlpack(view) or numpy.from_dlpack(view). A view used "
          "after its release reads whatever the pager put there next (in checked mode, htp's "
          "poison pattern once its extent is freed): keep views inside acquire/release, or use "
          "`acquired`.")
      .def("release", &release_views, nb::arg("tensors"), nb::arg("stream").none() = nb::none(),
           nb::arg("dirty") = false,
           nb::sig("def release(self, tensors: Tensor | collections.abc.Sequence[Tensor], stream: "
                   "object = None, "
                   "dirty: bool = False) -> None"),
           "Unpins the tensor(s), ordered after the work queued on `stream` so far (one event). "
           "`dirty`: kernels wrote them (mutable tensors only).")
      .def("release_last_use", &release_last_use_view, nb::arg("tensor"),
           nb::arg("stream").none() = nb::none(),
           nb::sig("def release_last_use(self, tensor: Tensor, stream: object = None) -> None"),
           "Releases the last acquire of an activation at its last use (the backward pass read "
           "it): its content dies and its HBM is freed once `stream` passes this point, with no "
           "write-back. The next acquire is fresh (nothing copied in). Raises "
           "InvalidArgumentError for another kind, or while other acquires still hold it.")
      .def(
          "discard", [](pager_state& s, const py_tensor& t) { s.pager->discard(t.handle); },
          gil_free(), nb::arg("tensor"),
          "Marks the content of an activation that no acquire holds dead, without a use (its "
          "saved tensor was dropped): its HBM is freed now (a copy in flight is let finish "
          "first), it is never written back, and its next acquire is fresh. Needs no stream: the "
          "memory is reused only after the streams pass its last releases. A dead one: nothing "
          "to do. Raises InvalidArgumentError for another kind, or while it is acquired (release "
          "it first, or use release_last_use).")
      .def("acquired", &acquired, nb::arg("tensors"), nb::arg("stream").none() = nb::none(),
           nb::arg("dirty") = false,
           nb::sig("def acquired(self, tensors: Tensor | collections.abc.Sequence[Tensor], stream: "
                   "object = None, "
                   "dirty: bool = False) -> Acquired"),
           "`with pager.acquired(ts) as views:` acquire on entry, release on exit (also on "
           "error). `dirty` is checked before the acquire (weights cannot be dirty), so the exit's "
           "release cannot fail on it and leave the tensors pinned.");
}

/// Pager: what comes next (prefetch, schedule, routed groups, expect), evict, compact.
void bind_pager_hints(nb::class_<pager_state>& cls) {
  using gil_free = nb::call_guard<nb::gil_scoped_release>;
  cls.def(
         "prefetch", [](pager_state& s, const py_tensor& t) { s.pager->prefetch(t.handle); },
         gil_free(), nb::arg("tensor"),
         "Hint: bring the tensor in at prefetch priority; never blocks, never evicts "
         "sooner-needed.")
      .def(
          "set_schedule",
          [](pager_state& s, nb::handle tensors, bool cyclic) {
            const std::vector<tensor_handle> hs = handles_of(tensors_of(tensors));
            nb::gil_scoped_release unlocked;
            s.pager->set_schedule(hs, cyclic);
          },
          nb::arg("tensors"), nb::arg("cyclic") = false,
          nb::sig("def set_schedule(self, tensors: collections.abc.Sequence[Tensor], cyclic: bool "
                  "= False) -> None"),
          "Declares the access order (Belady's rule, prefetch); `cyclic` for decode steps.")
      .def(
          "set_routed_group",
          [](pager_state& s, const py_tensor& anchor, nb::handle members, unsigned k) {
            const std::vector<tensor_handle> hs = handles_of(tensors_of(members));
            nb::gil_scoped_release unlocked;
            s.pager->set_routed_group(anchor.handle, hs, k);
          },
          nb::arg("anchor"), nb::arg("members"), nb::arg("k"),
          nb::sig("def set_routed_group(self, anchor: Tensor, members: "
                  "collections.abc.Sequence[Tensor], k: int) "
                  "-> None"),
          "Declares tensors used in a data-dependent way after `anchor` (a mixture-of-experts "
          "layer's expert weights after its router, `k` chosen each time), kept out of the "
          "schedule: htp ranks them by popularity, guesses the `k` most popular ahead of the "
          "router (into free room only) and evicts the least popular first. An empty `members` "
          "removes the group. Raises InvalidArgumentError for a member in two groups, an anchor "
          "that is a member, or k outside [1, len(members)].")
      .def(
          "expect",
          [](pager_state& s, nb::handle tensors) {
            const std::vector<tensor_handle> hs = handles_of(tensors_of(tensors));
            nb::gil_scoped_release unlocked;
            s.pager->expect(hs);
          },
          nb::arg("tensors"),
          nb::sig("def expect(self, tensors: Tensor | collections.abc.Sequence[Tensor]) -> None"),
          "The router chose `tensors` (members of a routed group): load them now, ahead of their "
          "acquire, evicting the least popular other members if room is short.")
      .def(
          "evict", [](pager_state& s, const py_tensor& t) { s.pager->evict(t.handle); }, gil_free(),
          nb::arg("tensor"), "Evicts an unpinned tensor now (writing it back if dirty), blocking.")
      .def(
          "compact", [](pager_state& s) { return s.pager->compact(); }, gil_free(),
          "Compacts HBM now, blocking; returns the moves made.");
}

/// Pager: reading back (copy_to_host, info), synchronize, metrics and traces.
void bind_pager_reports(nb::class_<pager_state>& cls) {
  using gil_free = nb::call_guard<nb::gil_scoped_release>;
  cls.def("copy_to_host", &copy_to_host, nb::arg("tensor"), nb::arg("out").none() = nb::none(),
          nb::sig("def copy_to_host(self, tensor: Tensor, out: object = None) -> object"),
          "The tensor's current bytes, copied into `out` (a writable CPU array of its size) or "
          "into a new torch tensor (numpy array without torch) of its dtype and shape; returns "
          "it.")
      .def(
          "synchronize", [](pager_state& s) { s.pager->synchronize(); }, gil_free(),
          "Blocks until every copy the pager started has completed.")
      .def("info", &info_of, nb::arg("tensor"),
           "The tensor's state: where ('host', 'loading', 'resident', 'writing_back'), pins, "
           "dirty, ...")
      .def(
          "metrics", [](const pager_state& s) { return metrics_dict(s.pager->metrics()); },
          "The metrics as a plain dict (the field names of htp/metrics.hpp; the keys and nesting "
          "of metrics_json).")
      .def(
          "metrics_json", [](const pager_state& s) { return to_json(s.pager->metrics()); },
          "The metrics as JSON text (htp::to_json), for files.")
      .def(
          "to_prometheus", [](const pager_state& s) { return to_prometheus(s.pager->metrics()); },
          "The metrics in Prometheus' text exposition format.")
      .def(
          "reset_metrics", [](pager_state& s) { s.pager->reset_metrics(); }, gil_free(),
          "Starts counters, histograms and the trace afresh (e.g. after warm-up).")
      .def(
          "write_trace",
          [](const pager_state& s, const std::string& path) { s.pager->write_trace(path); },
          gil_free(), nb::arg("path"), "Writes the Chrome/Perfetto trace (needs `trace=True`).");
}

void bind_pager(nb::module_& m) {
  bind_tensor(m);
  m.def("write_companion", &write_companion, nb::arg("source"), nb::arg("out"),
        nb::arg("pager_chunk_bytes").none() = nb::none(), nb::arg("threads") = 1,
        nb::sig("def write_companion(source: str | os.PathLike, out: str | os.PathLike, "
                "pager_chunk_bytes: int | str | None = None, threads: int = 1) -> dict"),
        "Writes the compressed companion of the safetensors file `source` to `out`: every "
        "bfloat16, float16 and float32 tensor entropy-coded, cut for a pager whose chunk_bytes is "
        "`pager_chunk_bytes` (default: PagerConfig's). Others are listed as skipped. Returns the "
        "totals: tensors, skipped, logical_bytes, wire_bytes, chunk_bytes. Same as "
        "`python -m htp.compress source out`.\n\n"
        "Raises CorruptDataError (a header that breaks the safetensors format: the tensor and the "
        "field), IoError (`source` cannot be read or `out` written), InvalidArgumentError (threads "
        "below 1, a chunk size that leaves no room).");
  bind_view(m);
  bind_acquired(m);
  using gil_free = nb::call_guard<nb::gil_scoped_release>;
  nb::class_<pager_state> cls(
      m, "Pager", nb::is_weak_referenceable(),
      "Pages registered tensors between pinned host memory and one GPU's HBM (pager.hpp).\n\n"
      "`Pager(device, hbm_budget, host_budget=0, **config)`: `config` is every PagerConfig field "
      "by name (`prefetch_lookahead=4`, `eviction=\"belady\"`, `checked=True`, ...); sizes may be "
      "strings (\"64MiB\"). Every method may be called from any thread; those that can block "
      "release the GIL.");
  cls.def(nb::new_(
              [](device_arg device, size_arg hbm_budget, size_arg host_budget, nb::kwargs config) {
                if (!nb::isinstance<py_device>(device)) {
                  throw htp::invalid_argument("Pager: device must come from htp.make_device()");
                }
                config["hbm_budget"] = hbm_budget;
                config["host_budget"] = host_budget;
                const pager_config c = make_pager_config(config);
                std::shared_ptr<py_device> d = nb::cast<std::shared_ptr<py_device>>(device);
                std::unique_ptr<htp::pager> p;
                {
                  nb::gil_scoped_release unlocked;  // reserves and pins both tiers: slow
                  p = std::make_unique<htp::pager>(*d->dev, c);
                }
                return std::make_shared<pager_state>(std::move(d), std::move(p));
              }),
          nb::arg("device"), nb::arg("hbm_budget"), nb::arg("host_budget") = 0, nb::arg("config"))
      .def_prop_ro(
          "device", [](const pager_state& s) { return s.device; }, "The device it pages into.")
      .def_prop_ro(
          "config", [](const pager_state& s) { return s.pager->config(); },
          "Its configuration (a copy).");
  bind_pager_registration(cls);
  bind_pager_access(cls);
  bind_pager_hints(cls);
  bind_pager_reports(cls);
}

}  // namespace htp::python
