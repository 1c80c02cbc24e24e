// Pager.metrics(): the metrics as a dict, built by the walk that to_json writes files with
// (htp::visit_metrics, which names each field once); no JSON crosses into Python.
#include "bindings.hpp"

#include <htp/metrics.hpp>

#include <nanobind/stl/string.h>

#include <string>
#include <vector>

namespace htp::python {
namespace {

/// Builds the nested dict visit_metrics walks.
struct dict_writer {
  std::vector<nb::dict> open_dicts{nb::dict()};
  std::vector<std::string> names;
  template <typename T>
  void number(const char* name, T value) {
    open_dicts.back()[name] = value;
  }
  void open(const char* name) {
    names.emplace_back(name);
    open_dicts.emplace_back();
  }
  void close() {
    nb::dict done = std::move(open_dicts.back());
    open_dicts.pop_back();
    open_dicts.back()[names.back().c_str()] = done;
    names.pop_back();
  }
};

}  // namespace

nb::dict metrics_dict(const pager_metrics& m) {
  dict_writer w;
  visit_metrics(m, w);
  return w.open_dicts.front();
}

}  // namespace htp::python
