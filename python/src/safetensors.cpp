// Pager.register_safetensors: a safetensors file's tensors as file-backed weights, its header read
// and checked in C++ (htp/safetensors.hpp), so that Python parses nothing. All or nothing. And
// htp.safetensors_header: that checked header as a dict (htp.torch.offload(weights=...) maps the
// files and registers each tensor at its offset).
#include "bindings.hpp"

#include <htp/error.hpp>
#include <htp/safetensors.hpp>
#include <htp/tensor_file.hpp>

#include <nanobind/stl/string.h>

#include <iterator>
#include <map>
#include <optional>
#include <utility>

namespace htp::python {
namespace {

// The entries `names` asks for (every tensor when absent), by name, without those of no elements.
// @throws htp::invalid_argument for a name the file does not hold.
std::map<std::string, const safetensors::entry*> chosen(
    const safetensors::header& h, const std::string& path,
    const std::optional<std::vector<std::string>>& names) {
  std::map<std::string, const safetensors::entry*> all;
  for (const safetensors::entry& e : h.tensors) all.emplace(e.name, &e);
  std::map<std::string, const safetensors::entry*> out;
  for (const std::string& name : names ? *names : std::vector<std::string>{}) {
    const auto it = all.find(name);
    if (it == all.end()) {
      throw htp::invalid_argument("register_safetensors: '" + path + "' has no tensor named '" +
                                  name + "' (its header lists " + std::to_string(all.size()) +
                                  " tensors)");
    }
    out.insert(*it);
  }
  if (!names) out = std::move(all);
  for (auto it = out.begin(); it != out.end();) {
    it = it->second->bytes == 0 ? out.erase(it) : std::next(it);
  }
  return out;
}

host_array array_of(const safetensors::entry& e, const std::string& path) {
  host_array a{nullptr, e.bytes, {}, {}};
  try {
    a.dtype = dtype_from_name(e.dtype);
  } catch (const htp::invalid_argument&) {
    throw htp::invalid_argument("register_safetensors: tensor '" + e.name + "' of '" + path +
                                "' is " + e.dtype +
                                ", which htp's views cannot describe (they take F64, F32, F16, "
                                "BF16, I8-I64, U8-U64 and BOOL); leave it out of names");
  }
  for (const std::int64_t d : e.shape) a.shape.push_back(static_cast<std::size_t>(d));
  return a;
}

}  // namespace

nb::dict register_safetensors(pager_state& s, const std::string& path,
                              const std::optional<std::vector<std::string>>& names) {
  safetensors::header h;
  {
    nb::gil_scoped_release unlocked;
    h = safetensors::read_header(path);
  }
  const auto entries = chosen(h, path, names);
  std::map<std::string, host_array> arrays;  // every dtype checked before anything is registered
  for (const auto& [name, e] : entries) arrays.emplace(name, array_of(*e, path));
  std::map<std::string, tensor_handle> handles;
  {
    nb::gil_scoped_release unlocked;
    const auto file = tensor_file::open(path);
    try {
      for (const auto& [name, e] : entries) {
        handles.emplace(name, s.pager->register_file_tensor(name, e->bytes, file, e->begin));
      }
    } catch (...) {
      for (const auto& [name, handle] : handles) s.pager->unregister_tensor(handle);
      throw;
    }
  }
  nb::dict out;
  for (const auto& [name, handle] : handles) {
    const host_array& a = arrays.at(name);
    out[nb::str(name.data(), name.size())] =
        py_tensor{handle, name, a.dtype, a.shape, a.bytes, tensor_kind::weight};
  }
  return out;
}

namespace {

nb::dict header_dict(const safetensors::header& h) {
  nb::dict tensors;
  for (const safetensors::entry& e : h.tensors) {
    nb::dict t;
    t["dtype"] = e.dtype;
    nb::list shape;
    for (const std::int64_t d : e.shape) shape.append(d);
    t["shape"] = shape;
    t["begin"] = e.begin;
    t["end"] = e.end;
    t["bytes"] = e.bytes;
    tensors[nb::str(e.name.data(), e.name.size())] = t;
  }
  nb::dict metadata;
  for (const auto& [k, v] : h.metadata) metadata[nb::str(k.data(), k.size())] = v;
  nb::dict d;
  d["data_start"] = h.data_start;
  d["file_size"] = h.file_size;
  d["tensors"] = tensors;
  d["metadata"] = metadata;
  return d;
}

}  // namespace

void bind_safetensors(nb::module_& m) {
  m.def(
      "safetensors_header",
      [](const std::string& path) {
        safetensors::header h;
        {
          nb::gil_scoped_release unlocked;
          h = safetensors::read_header(path);
        }
        return header_dict(h);
      },
      nb::arg("path"), nb::sig("def safetensors_header(path: str) -> dict[str, object]"),
      "The checked header of the safetensors file at `path` (htp/safetensors.hpp): "
      "{'data_start', 'file_size', 'tensors': {name: {'dtype', 'shape', 'begin', 'end', "
      "'bytes'}} in the order of their bytes (begin and end are absolute offsets in the file), "
      "'metadata'}. Only the header is read.\n\n"
      "Raises CorruptDataError (a header that breaks the format: the tensor and the field), "
      "IoError (the file cannot be read: the path).");
}

}  // namespace htp::python
