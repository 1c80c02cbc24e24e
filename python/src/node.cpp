// htp.Node (htp._htp.Node): N GPUs over one pinned host tier (node.hpp). Each GPU's pager is an
// htp.Pager (gpu(g)); tensors are registered once for the node and named per GPU with on(t, g).
// Options by keyword, sizes as strings and kinds by name are handled here, as for htp.Pager.
#include "bindings.hpp"

#include <htp/error.hpp>
#include <htp/node.hpp>
#include <htp/prometheus.hpp>

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace htp::python {
namespace {

struct py_node {
  std::vector<std::shared_ptr<py_device>> devices;
  std::unique_ptr<htp::node> node;
  std::mutex mutex;
  std::vector<std::weak_ptr<pager_state>> pagers;  ///< gpu(g)'s pager states, made on first use
  ~py_node() {
    nb::gil_scoped_release unlocked;
    node.reset();
  }
};

/// A node tensor with the dtype and shape of each shard (one for replicated and local tensors).
struct py_node_tensor {
  node_tensor t;
  std::vector<py_tensor> shards;  ///< handle fields unset; on() fills them per GPU
  std::size_t local_gpu = 0;
};

struct shard_source {
  const void* data;
  py_tensor meta;
};

shard_source source_of(nb::handle source, const std::string& name, tensor_kind kind) {
  const host_array h = host_array_of(array_of(source, "register '" + name + "'"), name);
  return {h.data, py_tensor{{}, name, h.dtype, h.shape, h.bytes, kind}};
}

std::shared_ptr<pager_state> gpu_of(const std::shared_ptr<py_node>& n, std::size_t g) {
  htp::pager& p = n->node->gpu(g);  // checks g
  std::lock_guard<std::mutex> lock(n->mutex);
  if (auto s = n->pagers[g].lock()) return s;
  auto s = std::make_shared<pager_state>(n->devices[g], n, p);
  n->pagers[g] = s;
  return s;
}

py_tensor on_gpu(const py_node& n, const py_node_tensor& t, std::size_t g) {
  const tensor_handle h = n.node->on(t.t, g);
  py_tensor out = t.shards[n.node->layout(t.t) == node_layout::sharded ? g : 0];
  out.handle = h;
  return out;
}

std::shared_ptr<py_node> make_node(const std::vector<std::shared_ptr<py_device>>& devices,
                                   size_arg host_budget, nb::handle gpu, nb::kwargs options) {
  options["host_budget_bytes"] = parse_bytes(host_budget, "host_budget");
  options["gpu"] = gpu;
  const node_config config = make_node_config(options);
  auto n = std::make_shared<py_node>();
  n->devices = devices;
  std::vector<device*> raw;
  for (const auto& d : devices) {
    if (!d) throw htp::invalid_argument("Node: a device is None");
    raw.push_back(d->dev.get());
  }
  {
    nb::gil_scoped_release unlocked;
    n->node = std::make_unique<htp::node>(raw, config);
  }
  n->pagers.resize(devices.size());
  return n;
}

void bind_node_config(nb::module_& m) {
  m.def(
      "node_config", [](nb::kwargs options) { return make_node_config(options); },
      "A NodeConfig from keyword arguments (node.hpp), as pager_config makes a PagerConfig; "
      "`gpu` takes a PagerConfig or a dict.");
  nb::class_<node_config>(m, "NodeConfig", "A node's configuration (node.hpp, node_config).")
      .def(nb::init<>())
      .def_rw("host_budget_bytes", &node_config::host_budget_bytes)
      .def_rw("host_slab_bytes", &node_config::host_slab_bytes)
      .def_rw("host_page_bytes", &node_config::host_page_bytes)
      .def_rw("gpu", &node_config::gpu)
      .def_rw("discover_shared_links", &node_config::discover_shared_links)
      .def_rw("link_share", &node_config::link_share)
      .def_rw("numa_bytes_per_second", &node_config::numa_bytes_per_second)
      .def_rw("numa_placement", &node_config::numa_placement);
}

}  // namespace

/// Node.register_sharded: one shard per GPU, from any array-like each.
py_node_tensor register_sharded(py_node& n, std::string name, nb::handle parts, nb::handle kind_arg,
                                bool compress) {
  const tensor_kind kind = kind_of(kind_arg);
  py_node_tensor out;
  std::vector<std::size_t> bytes;
  std::vector<const void*> sources;
  weight_format f = weight_format::bf16;
  for (nb::handle a : nb::iter(parts)) {
    const shard_source s = source_of(a, name, kind);
    if (compress) f = weight_format_of(s.meta.dtype, name);
    out.shards.push_back(s.meta);
    bytes.push_back(s.meta.nbytes);
    sources.push_back(s.data);
  }
  if (compress && kind != tensor_kind::weight) {
    throw htp::invalid_argument("register_sharded '" + name +
                                "' with compress=True: only weights are compressed "
                                "(a mutable tensor would be re-encoded at every "
                                "write-back); pass kind='weight' or compress=False");
  }
  nb::gil_scoped_release unlocked;
  out.t = compress ? n.node->register_sharded_compressed(name, bytes, f, sources)
                   : n.node->register_sharded(name, bytes, kind, sources);
  return out;
}

void bind_node(nb::module_& m) {
  bind_node_config(m);
  nb::class_<py_node_tensor>(m, "NodeTensor", "A tensor registered with a node.")
      .def_prop_ro("name", [](const py_node_tensor& t) { return t.shards.front().name; });
  nb::class_<py_node>(
      m, "Node", nb::is_weak_referenceable(),
      "N GPUs over one pinned host tier (node.hpp): weights held once for all GPUs, shards, and "
      "each GPU's own tensors. `Node(devices, host_budget, gpu=dict(hbm_budget=...), **config)`: "
      "`gpu` is a PagerConfig or a dict of its fields, `config` NodeConfig's fields by name.")
      .def(nb::new_(&make_node), nb::arg("devices"), nb::arg("host_budget"), nb::arg("gpu"),
           nb::arg("config"))
      .def_prop_ro(
          "gpu_count", [](const py_node& n) { return n.node->gpu_count(); }, "The GPUs it spans.")
      .def("gpu", &gpu_of, nb::arg("g"),
           "GPU g's pager: acquire, release, schedules, metrics as for one GPU.")
      .def(
          "register_replicated",
          [](py_node& n, std::string name, nb::handle source, bool compress) {
            const shard_source s = source_of(source, name, tensor_kind::weight);
            const weight_format f =
                compress ? weight_format_of(s.meta.dtype, name) : weight_format::bf16;
            nb::gil_scoped_release unlocked;
            return py_node_tensor{
                compress ? n.node->register_replicated_compressed(name, s.meta.nbytes, f, s.data)
                         : n.node->register_replicated(name, s.meta.nbytes, s.data),
                {s.meta},
                0};
          },
          nb::arg("name"), nb::arg("source"), nb::arg("compress") = false,
          "A weight any GPU may page in, with one host copy (`compress=True`: one compressed "
          "copy that every GPU decodes; bfloat16, float16 or float32).")
      .def(
          "register_sharded", &register_sharded, nb::arg("name"), nb::arg("shards"),
          nb::arg("kind") = "weight", nb::arg("compress") = false,
          nb::sig("def register_sharded(self, name: str, shards: collections.abc.Sequence[object], "
                  "kind: str | TensorKind = 'weight', compress: bool = False) -> NodeTensor"),
          "One shard per GPU (shard g pages into GPU g only); `compress=True` keeps each weight "
          "shard compressed, as Pager.register does.")
      .def(
          "register_local",
          [](py_node& n, std::size_t g, std::string name, nb::handle source, nb::handle kind_arg) {
            const tensor_kind kind = kind_of(kind_arg);
            const shard_source s = source_of(source, name, kind);
            nb::gil_scoped_release unlocked;
            return py_node_tensor{
                n.node->register_local(g, name, s.meta.nbytes, kind, s.data), {s.meta}, g};
          },
          nb::arg("g"), nb::arg("name"), nb::arg("source"), nb::arg("kind") = "mutable",
          nb::sig("def register_local(self, g: int, name: str, source: object, "
                  "kind: str | TensorKind = 'mutable') -> NodeTensor"),
          "A tensor of GPU g alone (its KV blocks), held in the shared tier.")
      .def("on", &on_gpu, nb::arg("tensor"), nb::arg("g"),
           "The tensor as GPU g's pager names it (for gpu(g).acquire).")
      .def(
          "unregister", [](py_node& n, const py_node_tensor& t) { n.node->unregister(t.t); },
          nb::call_guard<nb::gil_scoped_release>(), nb::arg("tensor"),
          "Drops a node tensor from every GPU and the shared tier.")
      .def(
          "to_prometheus", [](const py_node& n) { return to_prometheus(n.node->metrics()); },
          "The node's metrics in Prometheus' text exposition format.");
}

}  // namespace htp::python
