// htp's C++ exceptions as typed Python exceptions, each carrying the C++ message:
//   htp::out_of_memory    -> htp.OutOfMemoryError(htp.Error, MemoryError)
//   htp::invalid_argument -> htp.InvalidArgumentError(htp.Error, ValueError)
//   htp::cuda_error       -> htp.CudaError(htp.Error, RuntimeError)
//   htp::io_error         -> htp.IoError(htp.Error, OSError), with errno set when there is one
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

// An htp.IoError carrying the message and, when the system gave one, the error number as the
// OSError's errno (the message already names the path; str() of the exception stays the message).
void set_io_error(const htp::io_error& e) {
  PyObject* exc = PyObject_CallFunction(g_io, "s", e.what());
  if (exc == nullptr) return;  // the failed call's own Python error stands
  if (e.error_number() != 0) {
    PyObject* number = PyLong_FromLong(e.error_number());
    if (number == nullptr || PyObject_SetAttrString(exc, "errno", number) != 0) PyErr_Clear();
    Py_XDECREF(number);
  }
  PyErr_SetObject(g_io, exc);
  Py_DECREF(exc);
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
                         "A file's bytes failed a check (a safetensors header or companion index "
                         "that breaks its format, compressed weights truncated or altered): which "
                         "check, which tensor and field. Re-export or re-write the file.");
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
      set_io_error(e);
    } catch (const htp::corrupt_data& e) {
      PyErr_SetString(g_corrupt, e.what());
    } catch (const htp::logic_error& e) {
      PyErr_SetString(g_logic, e.what());
    }
  });
}

}  // namespace htp::python
