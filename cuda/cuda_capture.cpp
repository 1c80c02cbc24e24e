// The cuda backend's device, part three: stream capture and executable graphs, and the checksum
// scratch slots that captured kernels keep until their graph is destroyed. See device.hpp,
// "capture and replay".
#include "cuda_device.hpp"

#include <htp/detail/host_function.hpp>

namespace htp::cuda {

void cuda_device::begin_capture(stream_ref s) {
  detail::check_not_in_host_function("begin_capture");
  device_guard g(ordinal_);
  const cudaError_t e = cudaStreamBeginCapture(native(s), cudaStreamCaptureModeThreadLocal);
  // Nesting: cudaErrorIllegalState, a breach of the capture rules like the others.
  if (e != cudaSuccess)
    throw_status(e, "cudaStreamBeginCapture", __FILE__, __LINE__, cudaErrorIllegalState);
}

graph_ref cuda_device::end_capture(stream_ref s) {
  detail::check_not_in_host_function("end_capture");
  device_guard g(ordinal_);
  const cudaStream_t st = native(s);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(st, &status, &id) != cudaSuccess) (void)cudaGetLastError();
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(st, &graph);
  if (e != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    // Unjoined or invalidated: the capture has ended (every stream out of capture mode) and its
    // kernels never ran, so their slots are free again. Wrong thread, or not the origin: it goes
    // on, and keeps them.
    cudaStreamCaptureStatus after = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &after) != cudaSuccess || after == cudaStreamCaptureStatusNone) {
      (void)cudaGetLastError();
      if (status != cudaStreamCaptureStatusNone) scratch_.give_back(take_capture_slots(id));
    }
    throw_status(e, "cudaStreamEndCapture", __FILE__, __LINE__, cudaErrorIllegalState);
  }
  std::vector<cuda::checksum_slot*> slots = take_capture_slots(id);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t i = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph is all htp keeps
  if (i != cudaSuccess) {
    scratch_.give_back(slots);
    throw_status(i, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  std::lock_guard lock(capture_mutex_);
  graph_slots_.emplace(exec, std::move(slots));
  return graph_ref{exec};
}

void cuda_device::launch_graph(graph_ref graph, stream_ref s) {
  detail::check_not_in_host_function("launch_graph");
  HTP_EXPECTS(static_cast<bool>(graph), invalid_argument, "launch_graph: a null graph");
  device_guard g(ordinal_);
  HTP_EXPECTS(!capturing(native(s)), logic_error,
              "launch_graph: the stream is capturing; htp does not capture graph launches");
  HTP_CUDA_CHECK(cudaGraphLaunch(native(graph), native(s)));
}

void cuda_device::destroy_graph(graph_ref graph) noexcept {
  if (!graph) return;
  device_guard g(ordinal_, std::nothrow);
  // An in-flight replay completes first (cudaGraphExecDestroy frees it then), so the graph's
  // checksum slots are retired until the device is next idle, not freed.
  (void)cudaGraphExecDestroy(native(graph));
  (void)cudaGetLastError();
  std::lock_guard lock(capture_mutex_);
  if (auto it = graph_slots_.find(native(graph)); it != graph_slots_.end()) {
    scratch_.retire(it->second);
    graph_slots_.erase(it);
  }
}

bool cuda_device::is_capturing(stream_ref s) {
  detail::check_not_in_host_function("is_capturing");
  device_guard g(ordinal_);
  return capturing(native(s));
}

bool cuda_device::capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HTP_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  return status != cudaStreamCaptureStatusNone;
}

cuda::checksum_slot* cuda_device::slot_for(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  HTP_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, &id));
  if (status == cudaStreamCaptureStatusNone) return scratch_.slot_for(s);
  cuda::checksum_slot* slot = scratch_.take_for_graph();
  std::lock_guard lock(capture_mutex_);
  capture_slots_[id].push_back(slot);
  return slot;
}

std::vector<cuda::checksum_slot*> cuda_device::take_capture_slots(unsigned long long id) {
  std::lock_guard lock(capture_mutex_);
  std::vector<cuda::checksum_slot*> slots;
  if (auto it = capture_slots_.find(id); it != capture_slots_.end()) {
    slots = std::move(it->second);
    capture_slots_.erase(it);
  }
  return slots;
}

}  // namespace htp::cuda
