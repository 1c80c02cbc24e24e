// htp's C++ exceptions as typed Python exceptions, each carrying the C++ message:
//   htp::out_of_memory    -> htp.OutOfMemoryError(htp.Error, MemoryError)
//   htp::invalid_argument -> htp.InvalidArgumentError(htp.Error, ValueError)
//   htp::cuda_error       -> htp.CudaError(htp.Error, RuntimeError)
//   htp::io_error         -> htp.IoError(htp.Error, OSError)
//   htp::corrupt_data     -> htp.CorruptDataError(htp.Error, ValueError)
//   htp::logic_error      -> htp.LogicError(htp.Error, RuntimeError)
#include "bindings.hpp"

#include <htp/error.hpp>

namespace htp::python {
namespace {

PyObject* g_error = nullptr;
PyObject* g_oom = nullptr;
PyObject* g_invalid = nullptr;
PyObject* g_cuda = nullptr;
PyObject* g_io = nullptr;
PyObject* g_corrupt = nullptr;
PyObject* g_logic = nullptr;

PyObject* make_error(nb::module_& m, const char* name, PyObject* builtin, const char* doc) {
  const std::string qualified = std::string("htp.") + name;
  nb::object bases = nb::make_tuple(nb::handle(g_error), nb::handle(builtin));
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

}  // namespace

void bind_errors(nb::module_& m) {
  g_error = PyErr_NewExceptionWithDoc("htp.Error", "Base of every error htp raises.",
                                      PyExc_Exception, nullptr);
  if (g_error == nullptr) throw nb::python_error();
  m.attr("Error") = nb::handle(g_error);
  g_oom = make_error(m, "OutOfMemoryError", PyExc_MemoryError,
                     "A tier could not make room; the message has the pager's diagnostic.");
  g_invalid = make_error(m, "InvalidArgumentError", PyExc_ValueError,
                         "Bad input: what was wrong and what to do instead.");
  g_cuda = make_error(m, "CudaError", PyExc_RuntimeError,
                      "The CUDA runtime or driver failed or cannot run here (reason and remedy).");
  g_io = make_error(m, "IoError", PyExc_OSError,
                    "A file or OS call failed (a tensor's file ended early, a trace could not be "
                    "written): path and reason.");
  g_corrupt = make_error(m, "CorruptDataError", PyExc_ValueError,
                         "Compressed weights failed a check (a truncated or altered companion "
                         "file): which check and where. Re-write the companion.");
  g_logic = make_error(m, "LogicError", PyExc_RuntimeError,
                       "An internal invariant failed (a bug in htp: please report it).");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const htp::out_of_memory& e) {
      PyErr_SetString(g_oom, e.what());
    } catch (const htp::invalid_argument& e) {
      PyErr_SetString(g_invalid, e.what());
    } catch (const htp::cuda_error& e) {
      PyErr_SetString(g_cuda, e.what());
    } catch (const htp::io_error& e) {
      PyErr_SetString(g_io, e.what());
    } catch (const htp::corrupt_data& e) {
      PyErr_SetString(g_corrupt, e.what());
    } catch (const htp::logic_error& e) {
      PyErr_SetString(g_logic, e.what());
    }
  });
}

}  // namespace htp::python
