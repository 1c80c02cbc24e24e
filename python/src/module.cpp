// htp._htp: the C++ API for Python. The package htp (python/htp/) wraps it; see docs/python.md.
#include "bindings.hpp"

#include <htp/version.hpp>

NB_MODULE(_htp, m) {
  m.doc() = "htp, the hierarchical tensor pager: the extension module (use the package htp)";
  m.attr("__version__") = HTP_VERSION_STRING;
  htp::python::bind_errors(m);
  htp::python::bind_device(m);
  htp::python::bind_pager_config(m);
  htp::python::bind_pager(m);
  htp::python::bind_node(m);
}
