// The sim backend's device, part two: streams as worker threads, events as completion signals,
// work (copies through the modelled link, checksums, fills, decodes, value words), and stream
// capture and graphs (sim_graph.hpp). Memory is in sim_device.cpp.
#include "sim/sim_device.hpp"

#include <htp/checksum.hpp>
#include <htp/codec.hpp>
#include <htp/detail/check.hpp>
#include <htp/detail/codec_format.hpp>
#include <htp/detail/host_function.hpp>
#include <htp/error.hpp>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace htp::sim {
namespace {

/// decode_weights_async with a status word: codec::check_frame first, then the CPU decoder; a
/// failure is the status (never a throw on the worker). A decode that fails after every check
/// passed (a frame whose checksums match corrupt codes: an encoder bug) reads as bad_code.
codec::status verified_decode(const void* wire, std::size_t wire_bytes, void* dst,
                              std::size_t dst_bytes) noexcept {
  const codec::status s =
      codec::check_frame(static_cast<const std::uint8_t*>(wire), wire_bytes, dst_bytes);
  if (s != codec::status::ok) return s;
  try {
    decode_weights(wire, wire_bytes, dst, dst_bytes);
  } catch (...) {
    return codec::status::bad_code;
  }
  return codec::status::ok;
}

}  // namespace

stream_ref sim_device::create_stream(stream_priority) {
  detail::check_not_in_host_function("create_stream");
  auto s = std::make_unique<stream>(errors_, config_.stream_queue_limit, &blocked_enqueues_);
  stream_ref ref{s.get()};
  std::lock_guard lock(objects_mutex_);
  streams_.emplace(s.get(), std::move(s));
  return ref;
}

void sim_device::destroy_stream(stream_ref s) noexcept {
  std::unique_ptr<stream> owned;
  {
    std::lock_guard lock(objects_mutex_);
    auto it = streams_.find(s.native);
    if (it == streams_.end()) return;
    owned = std::move(it->second);
    streams_.erase(it);
  }
  {
    // A capturing stream destroyed: its capture cannot be completed.
    // A capturing stream destroyed: its capture cannot be completed. It ends, invalidated, and
    // every stream of it leaves capture mode.
    std::lock_guard lock(capture_mutex_);
    if (auto c = capture_of(owned.get())) {
      c->invalidate("a capturing stream was destroyed");
      for (stream* joined : c->streams()) capturing_.erase(joined);
      c->end();
    }
  }
  owned.reset();  // drains and joins outside the lock
}

void sim_device::synchronize(stream_ref s) {
  detail::check_not_in_host_function("synchronize");
  auto& st = get(s);
  {
    std::lock_guard lock(capture_mutex_);
    if (auto c = capture_of(&st)) {
      refuse(*c, "synchronize(stream)", "cudaErrorStreamCaptureUnsupported",
             "the stream is capturing: its captured work is not scheduled to run");
    }
  }
  st.synchronize();
  errors_.rethrow();
}

event_ref sim_device::create_event() {
  detail::check_not_in_host_function("create_event");
  return make_event(false);
}
event_ref sim_device::create_timed_event() {
  detail::check_not_in_host_function("create_timed_event");
  return make_event(true);
}

std::optional<std::chrono::nanoseconds> sim_device::elapsed(event_ref from, event_ref to) {
  detail::check_not_in_host_function("elapsed");
  event& a = get(from);
  event& b = get(to);
  HTP_EXPECTS(a.timed() && b.timed(), invalid_argument,
              "elapsed: both events must come from create_timed_event (as CUDA refuses events "
              "made without timing)");
  const auto sa = a.current(), sb = b.current();
  if (!sa || !sb) return std::nullopt;
  const auto ta = sa->set_at(), tb = sb->set_at();
  if (!ta || !tb) return std::nullopt;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(*tb - *ta);
}

void sim_device::destroy_event(event_ref e) noexcept {
  std::lock_guard lock(objects_mutex_);
  events_.erase(e.native);
}

void sim_device::record(event_ref e, stream_ref s) {
  detail::check_not_in_host_function("record");
  auto& st = get(s);
  auto& ev = get(e);
  {
    std::lock_guard lock(capture_mutex_);
    if (auto c = capture_of(&st)) {
      if (!c->invalid().empty()) refuse(*c, "record", "cudaErrorStreamCaptureInvalidated", "");
      ev.arm_captured({c, c->point_of(&st)});  // a captured event: no node, a capture point
      return;
    }
  }
  auto sig = ev.arm();
  st.enqueue([sig] {
    // Instantaneous on a GPU: it completes when the stream reaches it (modelled time).
    const auto at = current_task_ready_time();
    sig->set(at);
    set_current_task_completion(at);
  });
}

void sim_device::wait(event_ref e, stream_ref s) {
  detail::check_not_in_host_function("wait");
  auto& st = get(s);
  auto& ev = get(e);
  if (auto point = ev.captured(); point && point->in->active()) {
    wait_captured(st, *point);
    return;
  }
  auto sig = ev.current();
  {
    std::lock_guard lock(capture_mutex_);
    if (auto c = capture_of(&st)) {
      if (!c->invalid().empty()) refuse(*c, "wait", "cudaErrorStreamCaptureInvalidated", "");
      if (!sig) return;  // never recorded (or in a capture that has ended): nothing to wait for
      refuse(*c, "wait", "cudaErrorStreamCaptureIsolation",
             "the event was recorded outside the capture (CUDA needs cudaEventWaitExternal, "
             "which htp does not use); record it on a capturing stream of this capture");
    }
  }
  if (!sig) return;  // never recorded: no-op, as in CUDA
  st.enqueue([sig] {
    sig->wait();
    // On a GPU a satisfied wait costs nothing: the stream goes on at the later of reaching the
    // wait and the awaited event's modelled time, not when this worker thread got round to it
    // (which on a loaded host, or under a sanitizer, is many microseconds later).
    set_current_task_completion(std::max(current_task_ready_time(), *sig->set_at()));
  });
}

bool sim_device::query(event_ref e) {
  detail::check_not_in_host_function("query");
  auto& ev = get(e);
  if (auto point = ev.captured(); point && point->in->active()) {
    std::lock_guard lock(capture_mutex_);
    refuse(*point->in, "query(event)", "cudaErrorCapturedEvent",
           "the event was last recorded in an active stream capture");
  }
  auto sig = ev.current();
  return !sig || sig->is_set();
}

void sim_device::synchronize(event_ref e) {
  detail::check_not_in_host_function("synchronize");
  auto& ev = get(e);
  if (auto point = ev.captured(); point && point->in->active()) {
    std::lock_guard lock(capture_mutex_);
    refuse(*point->in, "synchronize(event)", "cudaErrorCapturedEvent",
           "the event was last recorded in an active stream capture");
  }
  if (auto sig = ev.current()) sig->wait();
  errors_.rethrow();
}

void sim_device::copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                            stream_ref s) {
  detail::check_not_in_host_function("copy_async");
  validate_copy(dst, src, bytes, direction);
  auto& st = get(s);
  const bool pageable = pageable_host_side(dst, src, bytes, direction);
  if (pageable) {
    std::lock_guard lock(capture_mutex_);
    HTP_EXPECTS(capture_of(&st) == nullptr, invalid_argument, "copy_async(", dst, ", ", src, ", ",
                bytes, ", ", to_string(direction),
                "): a pageable host side on a capturing stream; a replay would read it with no "
                "host synchronisation: use pinned or registered host memory");
  }
  link* l = direction == copy_direction::host_to_device   ? &h2d_
            : direction == copy_direction::device_to_host ? &d2h_
                                                          : nullptr;
  const bool move_bytes = !config_.timing_only;
  const bool queued = submit(s, [dst, src, bytes, l, move_bytes] {
    const auto done = l ? l->reserve(bytes, current_task_ready_time()) : link::clock::time_point{};
    if (move_bytes) std::memcpy(dst, src, bytes);
    if (l && l->modelled()) {
      std::this_thread::sleep_until(done);  // the modelled link's pace
      set_current_task_completion(done);
    }
  });
  // CUDA stages a copy to or from pageable host memory through its own pinned buffers, so
  // cudaMemcpyAsync may return only once the stream has reached the copy and moved the bytes
  // ("API synchronization behavior"); the sim always does, so a caller that issues one on a
  // held stream blocks here as it would on a GPU.
  if (pageable && queued) st.synchronize();
}

void sim_device::launch_host_func(std::function<void()> fn, stream_ref s) {
  detail::check_not_in_host_function("launch_host_func");
  HTP_EXPECTS(static_cast<bool>(fn), invalid_argument, "launch_host_func: empty function");
  submit(s, [fn = std::move(fn)] {
    const detail::host_function_scope inside;  // device calls from fn are refused
    fn();
  });
}

void sim_device::checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                                stream_ref s) {
  detail::check_not_in_host_function("checksum_async");
  HTP_EXPECTS(ptr != nullptr && result != nullptr && bytes > 0, invalid_argument, "checksum_async(",
              ptr, ", ", bytes, ", ", result, "): pointers must be non-null and bytes positive");
  if (config_.timing_only) {
    submit(s, [result] { *result = 0; });  // no bytes to sum: checksums are off
    return;
  }
  submit(s, [ptr, bytes, result] { *result = checksum(ptr, bytes); });
}

void sim_device::fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed,
                                    stream_ref s) {
  detail::check_not_in_host_function("fill_pattern_async");
  HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "fill_pattern_async(", ptr, ", ",
              bytes, "): pointer must be non-null and bytes positive");
  if (config_.timing_only) {
    submit(s, [] {});  // keeps stream order; nothing to write
    return;
  }
  submit(s, [ptr, bytes, seed] { fill_pattern(ptr, bytes, seed); });
}

void sim_device::decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                                      std::size_t dst_bytes, std::uint32_t* status, stream_ref s) {
  detail::check_not_in_host_function("decode_weights_async");
  HTP_EXPECTS(wire != nullptr && dst != nullptr && wire_bytes > 0 && dst_bytes > 0,
              invalid_argument, "decode_weights_async(", wire, ", ", wire_bytes, ", ", dst, ", ",
              dst_bytes, "): pointers must be non-null and sizes positive");
  if (status != nullptr) check_word(status);
  if (!config_.timing_only && status == nullptr) {
    // A corrupt frame throws htp::corrupt_data on the worker: the stream's sticky error.
    submit(s, [wire, wire_bytes, dst, dst_bytes] {
      decode_weights(wire, wire_bytes, dst, dst_bytes);
    });
    return;
  }
  if (!config_.timing_only) {
    submit(s, [wire, wire_bytes, dst, dst_bytes, status] {
      *status = static_cast<std::uint32_t>(verified_decode(wire, wire_bytes, dst, dst_bytes));
    });
    return;
  }
  const auto rate = config_.decode_bytes_per_second;
  submit(s, [dst_bytes, rate, status] {
    const auto ns =
        static_cast<std::int64_t>(static_cast<double>(dst_bytes) * 1e9 / static_cast<double>(rate));
    const auto done = current_task_ready_time() + std::chrono::nanoseconds(ns);
    std::this_thread::sleep_until(done);  // the modelled kernel's duration
    set_current_task_completion(done);
    if (status != nullptr) *status = 0;  // no bytes to verify
  });
}

void sim_device::write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) {
  detail::check_not_in_host_function("write_value_async");
  check_word(word);
  submit(s, [this, word, value] {
    const auto at = current_task_ready_time();  // instantaneous on a GPU
    store_value(word, value, at);
    set_current_task_completion(at);
  });
}

void sim_device::wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) {
  detail::check_not_in_host_function("wait_value_async");
  check_word(word);
  submit(s, [this, word, value] {
    std::unique_lock lock(values_mutex_);
    const auto reached = [&](std::uint32_t v) { return static_cast<std::int32_t>(v - value) >= 0; };
    values_cv_.wait(lock, [&] { return reached(__atomic_load_n(word, __ATOMIC_ACQUIRE)); });
    // Like an event wait: the stream goes on at the later of reaching the wait and the modelled
    // time of the write that satisfied it (the earliest remembered one that does; none: it was
    // written long before).
    auto at = current_task_ready_time();
    if (auto w = writes_.find(word); w != writes_.end()) {
      for (const auto& [v, t] : w->second) {
        if (reached(v)) {
          at = std::max(at, t);
          break;
        }
      }
    }
    set_current_task_completion(at);
  });
}

void sim_device::write_value(std::uint32_t* word, std::uint32_t value) {
  store_value(word, value, std::chrono::steady_clock::now());
}

void sim_device::verify_checksum_async(const void* ptr, std::size_t bytes, std::uint64_t expected,
                                       std::uint32_t* counters, stream_ref s) {
  detail::check_not_in_host_function("verify_checksum_async");
  HTP_EXPECTS(ptr != nullptr && counters != nullptr && bytes > 0, invalid_argument,
              "verify_checksum_async(", ptr, ", ", bytes, ", ", counters,
              "): pointers must be non-null and bytes positive");
  check_word(counters);
  check_word(counters + 1);
  if (config_.timing_only) {
    // No bytes to sum: it only counts.
    submit(s, [counters] { __atomic_fetch_add(&counters[0], 1u, __ATOMIC_ACQ_REL); });
    return;
  }
  submit(s, [ptr, bytes, expected, counters] {
    const bool bad = checksum(ptr, bytes) != expected;
    __atomic_fetch_add(&counters[0], 1u, __ATOMIC_ACQ_REL);
    if (bad) __atomic_fetch_add(&counters[1], 1u, __ATOMIC_ACQ_REL);
  });
}

void sim_device::synchronize_all() {
  detail::check_not_in_host_function("synchronize_all");
  {
    std::lock_guard lock(capture_mutex_);
    if (!capturing_.empty()) {
      refuse(*capturing_.begin()->second, "synchronize_all", "cudaErrorStreamCaptureUnsupported",
             "a stream of this device is capturing");
    }
  }
  std::vector<stream*> all;
  {
    std::lock_guard lock(objects_mutex_);
    for (auto& [key, st] : streams_) all.push_back(st.get());
  }
  for (auto* st : all) st->synchronize();
  errors_.rethrow();
}

stream& sim_device::get(stream_ref s) {
  detail::check_stream_handle(s.native, "sim device");  // what cuda refuses, refused the same way
  std::lock_guard lock(objects_mutex_);
  auto it = streams_.find(s.native);
  HTP_EXPECTS(it != streams_.end(), invalid_argument, "stream ", s.native,
              " was not created by this sim device (or was destroyed)");
  return *it->second;
}

event_ref sim_device::make_event(bool timed) {
  auto e = std::make_unique<event>(timed);
  event_ref ref{e.get()};
  std::lock_guard lock(objects_mutex_);
  events_.emplace(e.get(), std::move(e));
  return ref;
}

event& sim_device::get(event_ref e) {
  std::lock_guard lock(objects_mutex_);
  auto it = events_.find(e.native);
  HTP_EXPECTS(it != events_.end(), invalid_argument, "event ", e.native,
              " was not created by this sim device (or was destroyed)");
  return *it->second;
}

// Writes a value word at modelled time `at`, remembering the last few writes' times.
void sim_device::store_value(std::uint32_t* word, std::uint32_t value,
                             std::chrono::steady_clock::time_point at) {
  {
    std::lock_guard lock(values_mutex_);
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    auto& w = writes_[word];
    w.emplace_back(value, at);
    if (w.size() > 8) w.pop_front();
  }
  values_cv_.notify_all();
}

// ---- capture and replay -----------------------------------------------------------------------

bool sim_device::submit(stream_ref s, std::function<void()> task) {
  stream& st = get(s);
  {
    std::lock_guard lock(capture_mutex_);
    if (auto c = capture_of(&st)) {
      if (!c->invalid().empty()) refuse(*c, "work", "cudaErrorStreamCaptureInvalidated", "");
      c->add(&st, std::move(task));
      return false;
    }
  }
  st.enqueue(std::move(task));
  return true;
}

std::shared_ptr<capture> sim_device::capture_of(stream* s) const {
  auto it = capturing_.find(s);
  return it == capturing_.end() ? nullptr : it->second;
}

void sim_device::refuse(capture& c, const std::string& call, const char* cuda_name,
                        const std::string& why) {
  if (c.invalid().empty()) {
    c.invalidate(call + " during the capture (" + why + ")");
    throw logic_error(
        detail::concat("sim device: ", call, " refused during stream capture (CUDA: ", cuda_name,
                       "): ", why, "; the capture is invalidated: end_capture will throw"));
  }
  throw logic_error(detail::concat(
      "sim device: ", call, " on a stream capture that is invalidated (CUDA: ", cuda_name,
      ", cudaErrorStreamCaptureInvalidated): ", c.invalid(), "; end the capture with end_capture"));
}

void sim_device::check_thread_not_capturing(const char* call) {
  std::lock_guard lock(capture_mutex_);
  for (auto& [st, c] : capturing_) {
    if (c->thread() == std::this_thread::get_id()) {
      refuse(*c, call, "cudaErrorStreamCaptureUnsupported",
             "this thread began a capture still active (cudaStreamCaptureModeThreadLocal forbids "
             "potentially unsafe calls)");
    }
  }
}

void sim_device::wait_captured(stream& st, const capture_point& point) {
  std::lock_guard lock(capture_mutex_);
  auto mine = capture_of(&st);
  if (mine && mine != point.in) {
    refuse(*mine, "wait", "cudaErrorStreamCaptureMerge",
           "the event was recorded in another stream capture; captures cannot be merged");
  }
  if (!point.in->invalid().empty()) {
    refuse(*point.in, "wait", "cudaErrorStreamCaptureInvalidated", "");
  }
  point.in->join(&st, point.deps);  // a fork, or more dependencies for a stream already joined
  capturing_[&st] = point.in;
}

void sim_device::begin_capture(stream_ref s) {
  detail::check_not_in_host_function("begin_capture");
  stream& st = get(s);
  std::lock_guard lock(capture_mutex_);
  HTP_EXPECTS(capture_of(&st) == nullptr, logic_error,
              "begin_capture: the stream is capturing already (CUDA: cudaErrorIllegalState); "
              "captures do not nest");
  capturing_[&st] = std::make_shared<capture>(&st, std::this_thread::get_id());
}

graph_ref sim_device::end_capture(stream_ref s) {
  detail::check_not_in_host_function("end_capture");
  stream& st = get(s);
  std::string invalid, unjoined;
  std::vector<node> nodes;
  std::size_t lanes = 0;
  {
    std::lock_guard lock(capture_mutex_);
    auto c = capture_of(&st);
    HTP_EXPECTS(c != nullptr, logic_error,
                "end_capture: the stream is not capturing (CUDA: cudaErrorIllegalState)");
    HTP_EXPECTS(c->origin() == &st, logic_error,
                "end_capture: the stream joined a capture begun on another stream; end it on that "
                "(origin) stream (CUDA: cudaErrorStreamCaptureUnmatched)");
    HTP_EXPECTS(c->thread() == std::this_thread::get_id(), logic_error,
                "end_capture: called from a thread other than the one that began the capture "
                "(CUDA: cudaErrorStreamCaptureWrongThread)");
    for (stream* joined : c->streams()) capturing_.erase(joined);  // all leave capture mode
    c->end();
    invalid = c->invalid();
    if (invalid.empty()) unjoined = c->unjoined();
    nodes = c->take_nodes();
    lanes = c->lane_count();
  }
  HTP_EXPECTS(invalid.empty(), logic_error,
              "end_capture: the capture was invalidated (CUDA: "
              "cudaErrorStreamCaptureInvalidated) by ",
              invalid, "; nothing was captured");
  HTP_EXPECTS(unjoined.empty(), logic_error,
              "end_capture: unjoined (CUDA: cudaErrorStreamCaptureUnjoined): ", unjoined,
              "; the capture is discarded");
  auto g = std::make_unique<graph>(std::move(nodes), lanes, errors_);
  graph_ref ref{g.get()};
  std::lock_guard lock(objects_mutex_);
  graphs_.emplace(g.get(), std::move(g));
  return ref;
}

void sim_device::launch_graph(graph_ref g, stream_ref s) {
  detail::check_not_in_host_function("launch_graph");
  stream& st = get(s);
  graph* exec = nullptr;
  {
    std::lock_guard lock(objects_mutex_);
    auto it = graphs_.find(g.native);
    HTP_EXPECTS(it != graphs_.end(), invalid_argument, "launch_graph: graph ", g.native,
                " was not made by this sim device's end_capture (or was destroyed)");
    exec = it->second.get();
  }
  {
    std::lock_guard lock(capture_mutex_);
    HTP_EXPECTS(capture_of(&st) == nullptr, logic_error,
                "launch_graph: the stream is capturing; htp does not capture graph launches");
  }
  exec->launch(st);
}

void sim_device::destroy_graph(graph_ref g) noexcept {
  std::unique_ptr<graph> owned;
  {
    std::lock_guard lock(objects_mutex_);
    auto it = graphs_.find(g.native);
    if (it == graphs_.end()) return;
    owned = std::move(it->second);
    graphs_.erase(it);
  }
  owned.reset();  // waits for its queued replays outside the lock
}

bool sim_device::is_capturing(stream_ref s) {
  detail::check_not_in_host_function("is_capturing");
  stream& st = get(s);
  std::lock_guard lock(capture_mutex_);
  return capture_of(&st) != nullptr;
}

}  // namespace htp::sim
