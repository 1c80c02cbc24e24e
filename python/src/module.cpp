// htp._htp: the C++ API for Python, bound once: the package htp (python/htp/) re-exports its
// classes and functions as they are (htp.Pager is htp._htp.Pager); see docs/python.md, "Layering".
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
  htp::python::bind_static_step(m);
  htp::python::bind_shared_tier(m);
  htp::python::bind_safetensors(m);
}
