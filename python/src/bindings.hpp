// What the binding's files share: the Python-side objects that own a device and a pager, the
// conversions of Python arguments (options by name, sizes, kinds, tensor lists, sources), and the
// per-file bind functions module.cpp calls. Each Python method is defined once, here in C++: the
// classes of htp._htp are what htp exports (docs/python.md, "Layering").
#pragma once

#include <htp/device.hpp>
#include <htp/node.hpp>
#include <htp/pager.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace htp::python {

namespace nb = nanobind;

/// A device as Python holds it: shared, so that pagers and the views they hand out keep it alive.
struct py_device {
  std::unique_ptr<htp::device> dev;
  std::string backend;  ///< "cuda" or "sim"
  int ordinal = 0;
  bool is_cuda() const noexcept { return backend == "cuda"; }
};

/// A registered tensor as Python sees it: the pager's handle plus the dtype and shape it was
/// registered with (the pager itself knows bytes only). A value, like the handle.
struct py_tensor {
  htp::tensor_handle handle;
  std::string name;
  nb::dlpack::dtype dtype{};
  std::vector<std::size_t> shape;
  std::size_t nbytes = 0;
  htp::tensor_kind kind = htp::tensor_kind::weight;
};

class stream_binder;

/// What one Python Pager owns: the pager (or, for a node's GPU, a reference to the node's), the
/// stream policy, the caller objects kept alive for zero-copy registrations and the caller regions
/// lent on its behalf. Views hold a shared_ptr to it, so the memory they point into outlives them.
struct pager_state : std::enable_shared_from_this<pager_state> {
  std::shared_ptr<py_device> device;
  std::shared_ptr<void> owner;        ///< the node, for a node's pager; null otherwise
  std::unique_ptr<htp::pager> owned;  ///< null for a node's pager
  htp::pager* pager = nullptr;
  std::unique_ptr<stream_binder> streams;

  std::mutex mutex;  ///< guards the three maps below
  /// Caller objects whose memory a tensor registered without a copy lives in, by handle.
  std::unordered_map<std::uint64_t, nb::object> keep_alive;
  /// Regions lent with add_host_region for one tensor (removed when it is unregistered), by handle.
  std::unordered_map<std::uint64_t, void*> own_regions;
  /// The buffers lent with Pager.lend, by start address, kept alive until Pager.unlend (the pager
  /// itself knows the regions: pager::in_host_region; this only holds the objects).
  std::unordered_map<std::uintptr_t, nb::object> lent;

  pager_state(std::shared_ptr<py_device> d, std::unique_ptr<htp::pager> p);
  pager_state(std::shared_ptr<py_device> d, std::shared_ptr<void> node_owner, htp::pager& p);
  ~pager_state();
};

inline std::uint64_t key_of(htp::tensor_handle h) noexcept {
  return (std::uint64_t{h.generation} << 32) | h.index;
}

/// A caller's source array, checked: CPU memory, C-contiguous, a dtype htp can describe.
struct host_array {
  void* data = nullptr;
  std::size_t bytes = 0;
  nb::dlpack::dtype dtype{};
  std::vector<std::size_t> shape;
};
/// `a` as a host_array (pager.cpp). @throws htp::invalid_argument naming `name` for memory that is
/// not the CPU's, a non-contiguous layout, an unsupported dtype or no bytes.
host_array host_array_of(const nb::ndarray<nb::ro>& a, const std::string& name);

/// An argument parse_bytes reads (any object; typed "int | str" in the stubs).
class size_arg : public nb::object {
  NB_OBJECT_DEFAULT(size_arg, object, "int | str", [](PyObject*) { return true; })
};
/// A device argument, checked by the callee so that a wrong one raises InvalidArgumentError (typed
/// "Device" in the stubs).
class device_arg : public nb::object {
  NB_OBJECT_DEFAULT(device_arg, object, "Device", [](PyObject*) { return true; })
};

/// What nanobind's ndarray caster takes of a caller's source: a torch tensor detached (DLPack
/// refuses one that requires grad), anything else as it is (numpy arrays, buffers, DLPack
/// producers).
nb::object exportable(nb::handle source);
/// `source` (after exportable) as an array, for `what` (e.g. "register 'w'").
/// @throws htp::invalid_argument when it is not one htp can read (no DLPack, no buffer protocol).
nb::ndarray<nb::ro> array_of(nb::handle source, const std::string& what);
/// A tensor kind from htp.TensorKind or its name: "weight", "mutable", "mutable_state" or
/// "activation".
/// @throws htp::invalid_argument for another name.
tensor_kind kind_of(nb::handle kind);
/// An htp.Tensor or an iterable of them, as a list; `single` (when given) says it was one tensor.
/// @throws htp::invalid_argument for anything else.
std::vector<py_tensor> tensors_of(nb::handle tensors, bool* single = nullptr);
/// repr(value).
std::string repr_of(nb::handle value);

// pager_config.cpp: options by name.
/// Bytes from an int (a float with no fraction) or a string such as "4GiB" or "512 MB" (units
/// B, kB, MB, GB, TB, KiB, MiB, GiB, TiB, any case). @throws htp::invalid_argument naming `what`
/// for a bool, a negative, fractional or unreadable value.
std::size_t parse_bytes(nb::handle value, const std::string& what);
/// Sets each field of the bound config object `obj` that `options` names (hbm_budget and
/// host_budget stand for their *_bytes fields): enums by member name, sizes as parse_bytes reads
/// them, LinkConfig and PagerConfig fields from dicts, latency_budget_ms from a timedelta.
/// Returns `obj`. @throws htp::invalid_argument naming `what` and the field for an unknown name,
/// an unknown enum name, an unreadable size or a value of the wrong type.
nb::object configure(nb::object obj, const nb::dict& options, const std::string& what);
/// A pager_config from keyword options (configure). @throws as configure.
pager_config make_pager_config(const nb::dict& options);
/// A node_config from keyword options (configure; `gpu` takes a PagerConfig or a dict).
node_config make_node_config(const nb::dict& options);

// metrics.cpp
/// The metrics as a dict with the keys and nesting of to_json (htp/metrics.hpp), built from the
/// counter lists directly.
nb::dict metrics_dict(const pager_metrics& m);

/// The pager's handles of `ts`, in order.
inline std::vector<htp::tensor_handle> handles_of(const std::vector<py_tensor>& ts) {
  std::vector<htp::tensor_handle> hs;
  hs.reserve(ts.size());
  for (const py_tensor& t : ts) hs.push_back(t.handle);
  return hs;
}

// dtypes.cpp
/// "float32", "bfloat16", ... for a DLPack dtype. @throws htp::invalid_argument for one htp's
/// views cannot describe (lanes != 1, or an unknown code).
std::string dtype_name(nb::dlpack::dtype d);
/// The DLPack dtype for a name above, or for a safetensors name ("BF16", "F32", ...).
nb::dlpack::dtype dtype_from_name(const std::string& name);
/// The codec format of a registered array's dtype (bf16, fp16 or fp32).
/// @throws htp::invalid_argument for another dtype, naming `name` and saying what to do.
weight_format weight_format_of(nb::dlpack::dtype d, const std::string& name);

// safetensors.cpp
/// Pager.register_safetensors: reads and checks the header of the safetensors file at `path`
/// (htp/safetensors.hpp) and registers the tensors `names` (all when absent; those of no elements
/// skipped) with pager::register_file_tensor over one shared open file, all or nothing: on an
/// error those already registered are unregistered. Returns {name: Tensor}. The GIL is released
/// while the file is read and the tensors registered.
/// @throws htp::io_error (the path) if the file cannot be read; htp::corrupt_data (the tensor and
/// the field) for a header that breaks the format; htp::invalid_argument for a name the file does
/// not hold, a dtype htp's views cannot describe, or as register_file_tensor does.
nb::dict register_safetensors(pager_state& s, const std::string& path,
                              const std::optional<std::vector<std::string>>& names);

// The bind functions, one per file.
void bind_errors(nb::module_& m);
void bind_device(nb::module_& m);
void bind_pager_config(nb::module_& m);
void bind_pager(nb::module_& m);
void bind_node(nb::module_& m);
void bind_static_step(nb::module_& m);
void bind_shared_tier(nb::module_& m);  // shared_tier.cpp
void bind_safetensors(nb::module_& m);  // safetensors.cpp: safetensors_header

}  // namespace htp::python

namespace htp::python {

// pager_views.cpp
/// What acquire returns per tensor: the span, the dtype and shape, and the pager's state, kept
/// alive so that the memory the view points into outlives it.
class view {
 public:
  view(std::shared_ptr<pager_state> owner, const py_tensor& t, const device_span& span);
  /// A fresh DLPack capsule; `self` (this view's Python object) is its owner.
  nb::object dlpack(nb::handle self) const;
  /// (kDLCUDA, ordinal) or (kDLCPU, 0).
  nb::tuple dlpack_device() const;
  const py_tensor& tensor() const noexcept { return tensor_; }
  const device_span& span() const noexcept { return span_; }

 private:
  std::shared_ptr<pager_state> owner_;
  py_tensor tensor_;
  device_span span_;
};
void bind_view(nb::module_& m);
/// Pager.acquire: acquires `tensors` (an htp.Tensor or a list; one lock, all or nothing) on the
/// stream the caller's `stream` names (stream_binder::resolve) and returns one DLPack view per
/// tensor (the view alone for one tensor), each keeping `self` alive. The GIL is released while
/// the pager works.
nb::object acquire_views(pager_state& self, nb::handle tensors, nb::handle stream, bool wait);
/// Pager.release: releases `tensors` on the stream `stream` names (one event). The GIL is released
/// while the pager works.
void release_views(pager_state& self, nb::handle tensors, nb::handle stream, bool dirty);
/// Pager.release_last_use: pager::release_last_use of one activation on `stream` (resolved as
/// release_views does).
void release_last_use_view(pager_state& self, const py_tensor& tensor, nb::handle stream);
/// Pager.acquired: a context manager (htp._htp.Acquired) over acquire_views and release_views.
nb::object acquired(pager_state& self, nb::object tensors, nb::object stream, bool dirty);
void bind_acquired(nb::module_& m);

}  // namespace htp::python
