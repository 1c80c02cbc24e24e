// htp.SharedTier (htp._htp.SharedTier): a node's host tier in POSIX shared memory, shared by the
// node's processes (shared_tier.hpp; docs/python.md, "A process per GPU (torchrun)"). Entries
// cross to Python as numpy uint8 arrays viewing the segment, each owning a reference to the
// SharedTier, so the mapping outlives every array taken from it. publish releases the GIL while it
// waits for another rank and takes it back to call the caller's fill.
#include "bindings.hpp"

#include <htp/error.hpp>
#include <htp/shared_tier.hpp>

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <utility>

namespace htp::python {
namespace {

/// What one Python SharedTier owns: the process's handle on the segment, closed without the GIL
/// (closing may wait on the segment's lock).
struct py_tier {
  std::unique_ptr<shared_tier> tier;
  ~py_tier() {
    nb::gil_scoped_release unlocked;
    tier.reset();
  }
};

using u8_array = nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>;
using ro_u8_array = nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>>;

/// A numpy uint8 array over `bytes` bytes at `data`, keeping `owner` (the SharedTier) alive;
/// read-only unless `writable`.
nb::object array_over(void* data, std::size_t bytes, nb::handle owner, bool writable) {
  const std::size_t shape[1] = {bytes};
  if (writable) return u8_array(data, 1, shape, owner).cast();
  return ro_u8_array(static_cast<const std::uint8_t*>(data), 1, shape, owner).cast();
}

nb::list arrays_of(const std::vector<shared_entry>& entries, nb::handle owner, bool writable) {
  nb::list out;
  for (const shared_entry& e : entries) out.append(array_over(e.data, e.bytes, owner, writable));
  return out;
}

std::shared_ptr<py_tier> open_tier(std::string name, size_arg bytes, size_arg page_bytes,
                                   std::size_t max_entries, bool lock_in_memory,
                                   std::int64_t timeout_ms, std::string shm_dir) {
  if (timeout_ms < 0) {
    throw htp::invalid_argument("SharedTier '" + name + "': timeout_ms is " +
                                std::to_string(timeout_ms) + "; pass 0 or more milliseconds");
  }
  shared_tier_config c;
  c.name = std::move(name);
  c.bytes = parse_bytes(bytes, "bytes");
  c.page_bytes = parse_bytes(page_bytes, "page_bytes");
  c.max_entries = max_entries;
  c.lock_in_memory = lock_in_memory;
  c.timeout = std::chrono::milliseconds(timeout_ms);
  c.shm_dir = std::move(shm_dir);
  auto t = std::make_shared<py_tier>();
  nb::gil_scoped_release unlocked;  // may wait for another process to finish making the segment
  t->tier = shared_tier::open(c);
  return t;
}

/// (name, nbytes) pairs from any iterable of 2-sequences.
std::vector<shared_entry_request> requests_of(nb::handle batch) {
  std::vector<shared_entry_request> out;
  for (nb::handle item : nb::iter(batch)) {
    nb::sequence pair;
    if (!nb::try_cast(item, pair) || nb::len(pair) != 2 || nb::isinstance<nb::str>(item)) {
      throw htp::invalid_argument("SharedTier.publish: each entry of the batch must be a (name, "
                                  "nbytes) pair, not " +
                                  repr_of(item));
    }
    const nb::object name = pair[0], bytes = pair[1];
    out.push_back({nb::cast<std::string>(name), parse_bytes(bytes, "nbytes")});
  }
  return out;
}

nb::list publish(py_tier& t, nb::handle batch, nb::handle fill, bool writable) {
  const std::vector<shared_entry_request> requests = requests_of(batch);
  if (!fill.is_none() && !PyCallable_Check(fill.ptr())) {
    throw htp::invalid_argument("SharedTier.publish: fill must be callable (it receives the "
                                "entries as writable numpy uint8 arrays) or None, not " +
                                repr_of(fill));
  }
  const nb::object self = nb::find(&t);
  std::vector<shared_entry> entries;
  {
    nb::gil_scoped_release unlocked;  // another rank may be filling these names: wait without it
    entries = t.tier->publish(requests, [&](std::vector<shared_entry>& reserved) {
      if (fill.is_none()) return;
      nb::gil_scoped_acquire locked;
      fill(arrays_of(reserved, self, true));
    });
  }
  return arrays_of(entries, self, writable);
}

nb::object find(py_tier& t, const std::string& name, bool writable) {
  shared_entry e;
  {
    nb::gil_scoped_release unlocked;
    e = t.tier->find(name);
  }
  if (e.data == nullptr) return nb::none();
  return array_over(e.data, e.bytes, nb::find(&t), writable);
}

nb::dict listing_dict(const shared_tier_listing& l) {
  nb::dict d;
  d["name"] = l.name;
  d["path"] = l.path;
  d["segment_bytes"] = l.segment_bytes;
  d["live_ranks"] = l.live_ranks;
  d["dead_ranks"] = l.dead_ranks;
  d["entries"] = l.entries;
  d["entry_bytes"] = l.entry_bytes;
  d["stale"] = l.stale;
  d["problem"] = l.problem;
  return d;
}

/// SharedTier: what it is (data, sizes, name, slot, created, describe).
void bind_tier_state(nb::class_<py_tier>& cls) {
  cls.def_prop_ro(
         "data",
         [](py_tier& t) {
           return array_over(t.tier->data(), t.tier->data_bytes(), nb::find(&t), true);
         },
         "The whole data area as a writable numpy uint8 array: `pager.lend(tier.data)` once per "
         "pager, then register entries with copy=False.")
      .def_prop_ro(
          "data_bytes", [](const py_tier& t) { return t.tier->data_bytes(); },
          "Bytes of the data area.")
      .def_prop_ro(
          "name", [](const py_tier& t) { return t.tier->config().name; }, "The tier's name.")
      .def_prop_ro(
          "page_bytes", [](const py_tier& t) { return t.tier->config().page_bytes; },
          "The allocation unit of entries.")
      .def_prop_ro(
          "slot", [](const py_tier& t) { return t.tier->slot(); }, "This process's rank slot.")
      .def_prop_ro(
          "created", [](const py_tier& t) { return t.tier->created(); },
          "Whether this process created the segment.")
      .def(
          "describe", [](const py_tier& t) { return listing_dict(t.tier->describe()); },
          nb::sig("def describe(self) -> dict[str, object]"),
          "A snapshot of the segment: name, path, segment_bytes, live_ranks, dead_ranks, "
          "entries, entry_bytes, stale, problem.");
}

/// list_shared_tiers and remove_shared_tier.
void bind_tier_listing(nb::module_& m) {
  m.def(
      "list_shared_tiers",
      [](const std::string& shm_dir) {
        nb::list out;
        for (const shared_tier_listing& l : htp::list_shared_tiers(shm_dir))
          out.append(listing_dict(l));
        return out;
      },
      nb::arg("shm_dir") = "/dev/shm",
      nb::sig("def list_shared_tiers(shm_dir: str = '/dev/shm') -> list[dict[str, object]]"),
      "Every htp tier segment in `shm_dir`, as SharedTier.describe() reports one (a segment that "
      "cannot be read has its `problem`).");
  m.def(
      "remove_shared_tier",
      [](const std::string& name, bool force, const std::string& shm_dir) {
        return htp::remove_shared_tier(name, force, shm_dir);
      },
      nb::call_guard<nb::gil_scoped_release>(), nb::arg("name"), nb::arg("force") = false,
      nb::arg("shm_dir") = "/dev/shm",
      "Removes the segment `name` if no live process is attached (or `force`); returns whether "
      "one was removed. Raises InvalidArgumentError (a bad name), LogicError (live processes "
      "attached and not force), IoError (the unlink failed).");
}

}  // namespace

void bind_shared_tier(nb::module_& m) {
  nb::class_<py_tier> cls(
      m, "SharedTier", nb::is_weak_referenceable(),
      "A node's host tier in POSIX shared memory (shared_tier.hpp), shared by the node's "
      "processes (one per GPU). `SharedTier(name, bytes, page_bytes='64KiB', max_entries=16384, "
      "lock_in_memory=False, timeout_ms=60000, shm_dir='/dev/shm')`: the first process to open "
      "`name` creates the segment shm_dir/htp.<name>, the others attach (same bytes and page "
      "size). "
      "Entries are byte ranges the processes agree on by name; arrays taken from the tier keep it "
      "open. Lend `data` to a Pager once, then register entries with copy=False.\n\n"
      "Raises InvalidArgumentError (a bad name, zero bytes, a bad page size, a tier of this name "
      "made with another size or layout), OutOfMemoryError (shm_dir cannot hold it: raise "
      "docker's --shm-size), LogicError (every rank slot taken, the creator did not finish in "
      "time), IoError (a system call failed).");
  cls.def(nb::new_(&open_tier), nb::arg("name"), nb::arg("bytes"), nb::arg("page_bytes") = "64KiB",
          nb::arg("max_entries") = 16384, nb::arg("lock_in_memory") = false,
          nb::arg("timeout_ms") = 60000, nb::arg("shm_dir") = "/dev/shm")
      .def("publish", &publish, nb::arg("batch"), nb::arg("fill").none(),
           nb::arg("writable") = false,
           nb::sig("def publish(self, batch: collections.abc.Iterable[tuple[str, int | str]], "
                   "fill: collections.abc.Callable[[list[numpy.ndarray]], None] | None, "
                   "writable: bool = False) -> list[numpy.ndarray]"),
           "Publishes a batch of (name, nbytes) entries, all or nothing, and holds them for this "
           "process; returns numpy uint8 arrays viewing them, in batch order (read-only unless "
           "`writable`). If none exists, this caller reserves them and calls `fill(arrays)` "
           "(writable, with the GIL) to write their bytes; `fill=None` publishes them as the tier "
           "holds them. If all exist with the same sizes, it waits (without the GIL) for their "
           "publisher to finish and returns them; `fill` is not called. Of processes racing on "
           "one batch, exactly one fills. If `fill` raises, nothing is published and the "
           "exception propagates.\n\n"
           "Raises InvalidArgumentError (an empty batch, a repeated or bad name, zero bytes, a "
           "batch that only partly exists or exists with other sizes), OutOfMemoryError (the "
           "tier cannot hold the batch), LogicError (another publisher did not finish in "
           "timeout_ms).")
      .def("find", &find, nb::arg("name"), nb::arg("writable") = false,
           nb::sig("def find(self, name: str, writable: bool = False) -> numpy.ndarray | None"),
           "The published entry `name` as a numpy uint8 array (held for this process), or None. "
           "Does not wait. Raises InvalidArgumentError for a bad name.")
      .def(
          "release", [](py_tier& t, const std::string& name) { t.tier->release(name); },
          nb::call_guard<nb::gil_scoped_release>(), nb::arg("name"),
          "Stops holding `name` (freed when no process holds it). A hold is one per process: "
          "publishing or finding an entry it holds adds none. Arrays viewing it must not be used "
          "afterwards. Raises InvalidArgumentError if this process does not hold it.");
  bind_tier_state(cls);
  cls.attr("max_ranks") = shared_tier::max_ranks;
  bind_tier_listing(m);
}

}  // namespace htp::python
