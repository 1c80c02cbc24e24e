// htp.PagerConfig and the enums it uses: every pager_config field by its C++ name (pager.hpp); and
// options by name, the one place where keyword arguments become configs (htp.pager_config,
// htp.node_config, the constructors of htp.Pager and htp.Node, htp.make_device's SimConfig fields).
#include "bindings.hpp"

#include <htp/error.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <string_view>

namespace htp::python {

std::string repr_of(nb::handle value) { return nb::repr(value).c_str(); }

std::size_t parse_bytes(nb::handle value, const std::string& what) {
  const auto not_bytes = [&](const char* why) {
    return htp::invalid_argument(what + ": " + repr_of(value) + why);
  };
  if (PyBool_Check(value.ptr())) throw not_bytes(" is not a size in bytes");
  double amount = 0;
  if (nb::isinstance<nb::str>(value)) {
    static const std::regex size(R"(\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*)");
    static const std::pair<std::string_view, double> units[] = {
        {"", 1},      {"b", 1},        {"kb", 1e3},     {"mb", 1e6},     {"gb", 1e9},
        {"tb", 1e12}, {"kib", 0x1p10}, {"mib", 0x1p20}, {"gib", 0x1p30}, {"tib", 0x1p40}};
    const std::string text = nb::cast<std::string>(value);
    std::smatch match;
    const double* scale = nullptr;
    if (std::regex_match(text, match, size)) {
      std::string unit = match[2].str();
      for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      for (const auto& [name, factor] : units) {
        if (unit == name) scale = &factor;
      }
    }
    if (scale == nullptr) {
      throw not_bytes(" is not a size; write bytes (an int) or e.g. '4GiB', '512MB'");
    }
    amount = std::strtod(match[1].str().c_str(), nullptr) * *scale;
  } else if (nb::isinstance<nb::float_>(value)) {
    amount = nb::cast<double>(value);
  } else if (nb::isinstance<nb::int_>(value)) {
    std::size_t bytes = 0;
    if (!nb::try_cast(value, bytes, false))
      throw not_bytes(" is not a size in bytes (an int >= 0)");
    return bytes;
  } else {
    throw not_bytes(" is not a size in bytes (an int >= 0)");
  }
  if (!std::isfinite(amount) || std::floor(amount) != amount) {
    throw not_bytes(" is not a whole number of bytes");
  }
  if (amount < 0 || amount >= 0x1p64) throw not_bytes(" is not a size in bytes (an int >= 0)");
  return static_cast<std::size_t>(amount);
}

namespace {

// The public, settable names of a bound config class, sorted (dir()).
std::vector<std::string> fields_of(nb::handle obj) {
  std::vector<std::string> out;
  const nb::object names = nb::steal(PyObject_Dir(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))));
  if (!names.is_valid()) throw nb::python_error();
  for (nb::handle n : names) {
    std::string name = nb::cast<std::string>(n);
    if (!name.empty() && name[0] != '_') out.push_back(std::move(name));
  }
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// `value` for the field `name` of `obj` (whose current value is `current`): an enum by its member
// name, a LinkConfig or PagerConfig from a dict of its fields, a timedelta as milliseconds, sizes
// as parse_bytes reads them; anything else as it is.
nb::object converted(nb::handle current, const std::string& name, nb::handle value,
                     const std::string& what) {
  const nb::object enum_type = nb::module_::import_("enum").attr("Enum");
  if (PyObject_IsInstance(current.ptr(), enum_type.ptr()) == 1 && nb::isinstance<nb::str>(value)) {
    const nb::handle type = current.type();
    const nb::object members = type.attr("__members__");
    if (!nb::cast<bool>(members.attr("__contains__")(value))) {
      std::vector<std::string> names;
      for (nb::handle k : members) names.push_back(nb::cast<std::string>(k));
      std::sort(names.begin(), names.end());
      throw htp::invalid_argument(what + "." + name + ": " + repr_of(value) + " is none of " +
                                  joined(names));
    }
    return nb::getattr(type, value);
  }
  if (nb::isinstance<transfer_link_config>(current)) {
    if (nb::isinstance<transfer_link_config>(value)) return nb::borrow(value);
    if (!nb::isinstance<nb::dict>(value)) {
      throw htp::invalid_argument(what + "." + name +
                                  ": pass an htp.LinkConfig or a dict of its fields");
    }
    return configure(nb::cast(transfer_link_config{}), nb::borrow<nb::dict>(value),
                     what + "." + name);
  }
  if (nb::isinstance<pager_config>(current) && nb::isinstance<nb::dict>(value)) {
    return nb::cast(make_pager_config(nb::borrow<nb::dict>(value)));
  }
  if (name == "latency_budget_ms" &&
      nb::isinstance(value, nb::module_::import_("datetime").attr("timedelta"))) {
    return nb::int_(nb::cast<double>(value.attr("total_seconds")()) * 1000);
  }
  const auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("_bytes") || ends_with("bytes_per_second")) {
    return value.is_none() ? nb::none() : nb::cast(parse_bytes(value, what + "." + name));
  }
  return nb::borrow(value);
}

}  // namespace

nb::object configure(nb::object obj, const nb::dict& options, const std::string& what) {
  const std::vector<std::string> fields = fields_of(obj);
  for (auto [key, value] : options) {
    std::string name = nb::cast<std::string>(key);
    if (name == "hbm_budget") name = "hbm_budget_bytes";
    if (name == "host_budget") name = "host_budget_bytes";
    if (std::find(fields.begin(), fields.end(), name) == fields.end()) {
      throw htp::invalid_argument(what + ": no option " + repr_of(key) + "; the options are " +
                                  joined(fields));
    }
    try {
      nb::setattr(obj, name.c_str(), converted(nb::getattr(obj, name.c_str()), name, value, what));
    } catch (nb::python_error& e) {
      if (!e.matches(PyExc_TypeError)) throw;
      throw htp::invalid_argument(what + "." + name + ": " + repr_of(value) +
                                  " has the wrong type (" + nb::str(e.value()).c_str() + ")");
    }
  }
  return obj;
}

pager_config make_pager_config(const nb::dict& options) {
  return nb::cast<pager_config>(configure(nb::cast(pager_config{}), options, "PagerConfig"));
}

node_config make_node_config(const nb::dict& options) {
  return nb::cast<node_config>(configure(nb::cast(node_config{}), options, "NodeConfig"));
}

void bind_pager_config(nb::module_& m) {
  nb::enum_<tensor_kind>(m, "TensorKind")
      .value("weight", tensor_kind::weight, "Read-only; eviction just frees HBM.")
      .value("mutable_state", tensor_kind::mutable_state, "KV blocks: written back when dirty.")
      .value("activation", tensor_kind::activation,
             "A training step's saved tensor: dead until written, written back only if evicted "
             "live, freed unwritten at release_last_use.");
  nb::enum_<eviction_rule>(m, "EvictionRule")
      .value("automatic", eviction_rule::automatic)
      .value("lru", eviction_rule::lru)
      .value("belady", eviction_rule::belady);
  nb::enum_<prefetch_mode>(m, "PrefetchMode")
      .value("pipeline", prefetch_mode::pipeline)
      .value("min_page_ins", prefetch_mode::min_page_ins);
  nb::enum_<lookahead_mode>(m, "LookaheadMode")
      .value("count", lookahead_mode::count, "The next prefetch_lookahead tensors.")
      .value("automatic", lookahead_mode::automatic,
             "Ahead in bytes and time, by the compute measured on the device.");
  nb::enum_<oom_policy>(m, "OomPolicy")
      .value("throw_error", oom_policy::throw_error)
      .value("allow_degraded", oom_policy::allow_degraded);

  nb::enum_<host_region_kind>(m, "HostRegionKind")
      .value("pinned", host_region_kind::pinned, "Page-locked and mapped for this GPU already.")
      .value("pageable", host_region_kind::pageable, "Ordinary memory; htp registers it.")
      .value("pageable_read_only", host_region_kind::pageable_read_only,
             "Read-only memory (a mapped file); weights only.");

  nb::class_<transfer_link_config>(m, "LinkConfig",
                                   "One direction's rate cap (transfer_engine.hpp).")
      .def(nb::init<>())
      .def_rw("rate_bytes_per_second", &transfer_link_config::rate_bytes_per_second,
              "The cap; None = 80% of the calibrated link.")
      .def_rw("link_bytes_per_second", &transfer_link_config::link_bytes_per_second,
              "The link's peak; None = measured at construction.")
      .def_rw("unlimited", &transfer_link_config::unlimited)
      .def_rw("burst_bytes", &transfer_link_config::burst_bytes);

  nb::class_<pager_config>(m, "PagerConfig", "A pager's configuration (pager.hpp, pager_config).")
      .def(nb::init<>())
      .def_rw("hbm_budget_bytes", &pager_config::hbm_budget_bytes)
      .def_rw("host_budget_bytes", &pager_config::host_budget_bytes)
      .def_rw("slab_bytes", &pager_config::slab_bytes)
      .def_rw("page_bytes", &pager_config::page_bytes)
      .def_rw("chunk_bytes", &pager_config::chunk_bytes)
      .def_rw("max_in_flight_chunks", &pager_config::max_in_flight_chunks)
      .def_rw("h2d", &pager_config::h2d)
      .def_rw("d2h", &pager_config::d2h)
      .def_rw("lookahead", &pager_config::lookahead)
      .def_rw("prefetch_lookahead", &pager_config::prefetch_lookahead)
      .def_rw("lookahead_max_tensors", &pager_config::lookahead_max_tensors)
      .def_rw("popularity_half_life", &pager_config::popularity_half_life)
      .def_rw("eviction", &pager_config::eviction)
      .def_rw("prefetch", &pager_config::prefetch)
      .def_rw("compaction_threshold", &pager_config::compaction_threshold)
      .def_rw("auto_compact", &pager_config::auto_compact)
      .def_rw("on_oom", &pager_config::on_oom)
      .def_prop_rw(
          "latency_budget_ms", [](const pager_config& c) { return c.latency_budget.count(); },
          [](pager_config& c, std::int64_t ms) {
            c.latency_budget = std::chrono::milliseconds(ms);
          })
      .def_rw("trace", &pager_config::trace)
      .def_rw("trace_capacity", &pager_config::trace_capacity)
      .def_rw("checked", &pager_config::checked)
      .def_rw("modelled_compression_ratio", &pager_config::modelled_compression_ratio)
      .def_rw("verify_page_ins", &pager_config::verify_page_ins);

  m.def(
      "parse_bytes",
      [](nb::handle value, const std::string& what) { return parse_bytes(value, what); },
      nb::arg("value").none(), nb::arg("what") = "size",
      nb::sig("def parse_bytes(value: int | float | str, what: str = 'size') -> int"),
      "Bytes from an int (a float with no fraction) or a string such as \"4GiB\", \"512 MB\".\n\n"
      "Raises InvalidArgumentError for a negative, fractional or unreadable value.");
  m.def(
      "pager_config", [](nb::kwargs options) { return make_pager_config(options); },
      "A PagerConfig from keyword arguments: every field by its name (pager.hpp), plus "
      "hbm_budget/host_budget for the *_bytes fields; sizes may be strings (\"4GiB\"); enum fields "
      "take their names (\"belady\"); h2d/d2h take LinkConfig or a dict; latency_budget_ms a "
      "timedelta too.");
}

}  // namespace htp::python
