// htp.StaticStep: a static plan and its step program (htp/static_plan.hpp, static_step.hpp) from
// Python. The host copies are copied once into pinned memory the step owns; every tensor then has
// one fixed device address per position it is read at, handed out as DLPack views (the same
// memory for the step's life). begin/end take a stream as Pager.acquire does (streams.hpp): on a
// caller's CUDA stream they only enqueue, so they can be captured (torch.cuda.graph); on the sim
// (or a host wait) begin returns once the position's bytes are in.
#include "bindings.hpp"
#include "streams.hpp"

#include <htp/codec.hpp>
#include <htp/detail/check.hpp>
#include <htp/error.hpp>
#include <htp/static_step.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <mutex>

namespace htp::python {
namespace {

struct py_static_step {
  std::shared_ptr<py_device> device;
  static_plan_input in;
  std::vector<host_array> shapes;  // per tensor: dtype and shape (data: the pinned copy)
  void* pinned = nullptr;
  std::size_t pinned_bytes = 0;
  std::unique_ptr<stream_binder> streams;
  std::unique_ptr<static_step> step;
  std::mutex mutex;  ///< one thread drives the step at a time (begin/end)

  ~py_static_step() {
    step.reset();
    try {
      if (pinned != nullptr)
        device->dev->deallocate(memory_kind::pinned_host, pinned, pinned_bytes);
    } catch (...) {  // a destructor cannot throw; the device reported its failure already
    }
  }
};

/// Copies what each tensor stores (its bytes, or the frame `frames[t]` when coded) into one
/// pinned block, 4 KiB apart, and points the step's sources there.
std::vector<const void*> pin_sources(py_static_step& s,
                                     const std::vector<std::vector<std::uint8_t>>& frames) {
  auto stored = [&](std::size_t t) {
    return frames[t].empty()
               ? std::make_pair(static_cast<const void*>(s.shapes[t].data), s.shapes[t].bytes)
               : std::make_pair(static_cast<const void*>(frames[t].data()), frames[t].size());
  };
  for (std::size_t t = 0; t < s.shapes.size(); ++t) {
    s.pinned_bytes += (stored(t).second + 4095) / 4096 * 4096;
  }
  s.pinned = s.device->dev->allocate(memory_kind::pinned_host, s.pinned_bytes);
  std::vector<const void*> sources;
  auto* at = static_cast<std::byte*>(s.pinned);
  for (std::size_t t = 0; t < s.shapes.size(); ++t) {
    const auto [data, bytes] = stored(t);
    std::memcpy(at, data, bytes);
    sources.push_back(at);
    at += (bytes + 4095) / 4096 * 4096;
  }
  return sources;
}

/// The coded frame of each tensor `compress` names (empty for the others).
std::vector<std::vector<std::uint8_t>> encode_named(
    py_static_step& s, const std::optional<std::vector<bool>>& compress) {
  std::vector<std::vector<std::uint8_t>> frames(s.shapes.size());
  if (!compress) return frames;
  HTP_EXPECTS(compress->size() == s.shapes.size(), invalid_argument,
              "StaticStep: ", compress->size(), " compress flags for ", s.shapes.size(),
              " tensors");
  for (std::size_t t = 0; t < s.shapes.size(); ++t) {
    if (!(*compress)[t]) continue;
    const host_array& a = s.shapes[t];
    const weight_format f = weight_format_of(a.dtype, s.in.tensors[t].name);
    codec_options o;
    o.threads = 0;
    nb::gil_scoped_release unlocked;  // encodes: a few hundred MB/s per core
    frames[t] = encode_weights(a.data, a.bytes, f, o);
    s.in.tensors[t].wire_bytes = frames[t].size();
  }
  return frames;
}

std::shared_ptr<py_static_step> make_static_step(
    device_arg device, const std::vector<std::string>& names, const nb::list& sources,
    const std::vector<std::vector<std::size_t>>& positions, size_arg hbm_budget,
    double link_bytes_per_second, const std::optional<std::vector<double>>& compute_ns,
    const std::optional<std::vector<bool>>& keep, const std::optional<std::vector<bool>>& compress,
    double decode_bytes_per_second) {
  if (!nb::isinstance<py_device>(device)) {
    throw htp::invalid_argument("StaticStep: device must come from htp.make_device()");
  }
  HTP_EXPECTS(names.size() == nb::len(sources), invalid_argument, "StaticStep: ", names.size(),
              " names for ", nb::len(sources), " sources");
  HTP_EXPECTS(!compute_ns || compute_ns->size() == positions.size(), invalid_argument,
              "StaticStep: ", compute_ns ? compute_ns->size() : 0, " compute times for ",
              positions.size(), " positions");
  HTP_EXPECTS(!keep || keep->size() == names.size(), invalid_argument,
              "StaticStep: ", keep ? keep->size() : 0, " keep flags for ", names.size(),
              " tensors");
  auto s = std::make_shared<py_static_step>();
  s->device = nb::cast<std::shared_ptr<py_device>>(device);
  s->in.hbm_budget = parse_bytes(hbm_budget, "StaticStep hbm_budget");
  s->in.link_bytes_per_second = link_bytes_per_second;
  s->in.decode_bytes_per_second = decode_bytes_per_second;
  for (std::size_t t = 0; t < names.size(); ++t) {
    s->shapes.push_back(host_array_of(array_of(exportable(sources[t]), names[t]), names[t]));
    static_tensor x{names[t], s->shapes.back().bytes};
    x.keep = keep && (*keep)[t];
    s->in.tensors.push_back(x);
  }
  for (std::size_t p = 0; p < positions.size(); ++p) {
    s->in.positions.push_back({positions[p], compute_ns ? (*compute_ns)[p] : 0.0});
  }
  const auto frames = encode_named(*s, compress);
  nb::gil_scoped_release unlocked;
  const static_plan plan = plan_static(s->in);
  std::vector<const void*> pinned = pin_sources(*s, frames);
  s->streams = std::make_unique<stream_binder>(*s->device);
  s->step = std::make_unique<static_step>(*s->device->dev, s->in, plan, std::move(pinned));
  s->step->prime();
  return s;
}

nb::dict plan_dict(const py_static_step& s) {
  const static_plan& plan = s.step->plan();
  nb::list resident, streamed;
  for (std::size_t t = 0; t < s.in.tensors.size(); ++t) {
    (plan.resident_offset[t] != static_plan::npos ? resident : streamed)
        .append(s.in.tensors[t].name);
  }
  nb::dict d;
  d["predicted_step_ms"] = plan.predicted.step_ns / 1e6;
  d["plan_bound_ms"] = plan.predicted.plan_bound_ns() / 1e6;
  d["arena_bytes"] = plan.arena_bytes;
  d["ring_bytes"] = plan.ring_bytes;
  d["streamed_bytes"] = plan.streamed_bytes;
  d["resident"] = resident;
  d["streamed"] = streamed;
  return d;
}

/// A DLPack array over tensor t's fixed address at position p, owned by the step object `self`.
nb::object view_of(nb::handle self, std::size_t t, std::size_t p) {
  const auto& s = *nb::cast<std::shared_ptr<py_static_step>>(self);
  HTP_EXPECTS(t < s.shapes.size(), invalid_argument, "StaticStep.view: no tensor ", t);
  const host_array& a = s.shapes[t];
  const bool cuda = s.device->is_cuda();
  nb::ndarray<> arr(s.step->address(t, p), a.shape.size(), a.shape.data(), self, nullptr, a.dtype,
                    cuda ? nb::device::cuda::value : nb::device::cpu::value,
                    cuda ? s.device->ordinal : 0);
  return nb::cast(arr, nb::rv_policy::reference);
}

}  // namespace

void bind_static_step(nb::module_& m) {
  nb::class_<py_static_step>(
      m, "StaticStep",
      "A static plan of fixed addresses and its step program (static_step.hpp): "
      "`StaticStep(device, names, sources, positions, hbm_budget, link_bytes_per_second, "
      "compute_ns=None, keep=None, compress=None, decode_bytes_per_second=250e9)`. `sources[t]` "
      "is tensor t's host copy (copied once into pinned memory; coded first where `compress[t]`: "
      "bfloat16, float16 or float32); `positions[p]` the tensors position p reads; `keep[t]` "
      "holds tensor t resident. The plan is made, the arena allocated and primed here. One "
      "thread drives begin/end at a time.")
      .def(nb::new_(&make_static_step), nb::arg("device"), nb::arg("names"), nb::arg("sources"),
           nb::arg("positions"), nb::arg("hbm_budget"), nb::arg("link_bytes_per_second"),
           nb::arg("compute_ns").none() = nb::none(), nb::arg("keep").none() = nb::none(),
           nb::arg("compress").none() = nb::none(), nb::arg("decode_bytes_per_second") = 250e9)
      .def_prop_ro("plan", &plan_dict, "The plan: predicted step, arena, ring, resident names.")
      .def("view", &view_of, nb::arg("tensor"), nb::arg("position"),
           "A DLPack array of tensor `tensor` at its fixed address for `position` (the same "
           "memory for the step's life; its bytes are the tensor's while that position runs).")
      .def(
          "address",
          [](const py_static_step& s, std::size_t t, std::size_t p) {
            return reinterpret_cast<std::uintptr_t>(s.step->address(t, p));
          },
          nb::arg("tensor"), nb::arg("position"), "The fixed device address.")
      .def(
          "begin",
          [](py_static_step& s, std::size_t p, nb::handle stream) {
            const stream_binder::target target = s.streams->resolve(stream);
            nb::gil_scoped_release unlocked;
            std::lock_guard lock(s.mutex);
            s.step->begin(p, target.ref);
            s.streams->after_acquire(target);
            if (target.host_wait) s.device->dev->synchronize(target.ref);
          },
          nb::arg("position"), nb::arg("stream").none() = nb::none(),
          "Enters position p: its streamed tensors are in when work on `stream` after this runs "
          "(on sim, or with no CUDA stream, when this returns).")
      .def(
          "end",
          [](py_static_step& s, std::size_t p, nb::handle stream) {
            const stream_binder::target target = s.streams->resolve(stream);
            nb::gil_scoped_release unlocked;
            std::lock_guard lock(s.mutex);
            s.streams->before_release(target);
            s.step->end(p, target.ref);
          },
          nb::arg("position"), nb::arg("stream").none() = nb::none(),
          "Leaves position p once the work on `stream` so far is done, issuing the loads it "
          "frees; the last position joins the step's streams into `stream`.")
      .def(
          "synchronize",
          [](py_static_step& s) {
            nb::gil_scoped_release unlocked;
            s.device->dev->synchronize_all();
          },
          "Blocks until every stream of the device has finished.")
      .def(
          "take_decode_failures", [](py_static_step& s) { return s.step->take_decode_failures(); },
          "Names of the coded tensors whose decode in the last step failed its checks; clears.");
}

}  // namespace htp::python
