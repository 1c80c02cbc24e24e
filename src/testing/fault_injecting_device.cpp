// The fault-injecting device wrapper. See Note [Fault injection] in
// include/htp/fault_injecting_device.hpp.
#include <htp/fault_injecting_device.hpp>

#include <htp/detail/check.hpp>
#include <htp/error.hpp>

namespace htp {

const char* to_string(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::device_allocation: return "device_allocation";
    case fault_kind::pinned_allocation: return "pinned_allocation";
    case fault_kind::copy: return "copy";
    case fault_kind::event_record: return "event_record";
    case fault_kind::stream_wait: return "stream_wait";
    case fault_kind::value_write: return "value_write";
    case fault_kind::create: return "create";
    case fault_kind::kernel: return "kernel";
  }
  return "?";
}

namespace {

constexpr int injected_code = 999;

std::size_t kind_index(memory_kind k) { return k == memory_kind::device ? 0 : 1; }

}  // namespace

fault_injecting_device::fault_injecting_device(device& inner) : inner_(inner) {}

void fault_injecting_device::set_plan(const fault_plan& plan) {
  HTP_EXPECTS(plan.probability >= 0 && plan.probability <= 1, invalid_argument,
              "fault_plan.probability is ", plan.probability, "; it must be in [0, 1]");
  std::lock_guard lock(mutex_);
  plan_ = plan;
  selected_ = 0;
  rng_.seed(plan.seed);
}

void fault_injecting_device::disarm() { set_plan(fault_plan{0, 0, 0, 0, false}); }

std::uint64_t fault_injecting_device::calls(fault_kind k) const {
  std::lock_guard lock(mutex_);
  return calls_[static_cast<std::size_t>(k)];
}

std::uint64_t fault_injecting_device::injected(fault_kind k) const {
  std::lock_guard lock(mutex_);
  return injected_[static_cast<std::size_t>(k)];
}

std::uint64_t fault_injecting_device::injected() const {
  std::lock_guard lock(mutex_);
  std::uint64_t n = 0;
  for (auto v : injected_) n += v;
  return n;
}

std::uint64_t fault_injecting_device::selected_calls() const {
  std::lock_guard lock(mutex_);
  return selected_;
}

void fault_injecting_device::reset_counters() {
  std::lock_guard lock(mutex_);
  calls_.fill(0);
  injected_.fill(0);
}

std::size_t fault_injecting_device::outstanding_bytes(memory_kind kind) const {
  std::lock_guard lock(mutex_);
  return outstanding_[kind_index(kind)];
}

void fault_injecting_device::intercept(fault_kind k, const char* call, std::size_t bytes) {
  const auto i = static_cast<std::size_t>(k);
  std::uint64_t n = 0;
  {
    std::lock_guard lock(mutex_);
    ++calls_[i];
    if ((plan_.kinds & mask_of(k)) == 0) return;
    n = ++selected_;
    const bool by_number =
        plan_.fail_at != 0 && (n == plan_.fail_at || (plan_.persistent && n > plan_.fail_at));
    const bool by_chance = plan_.probability > 0 &&
                           std::uniform_real_distribution<double>(0, 1)(rng_) < plan_.probability;
    if (!by_number && !by_chance) return;
    ++injected_[i];
  }
  if (k == fault_kind::device_allocation || k == fault_kind::pinned_allocation) {
    throw out_of_memory(detail::concat("injected fault: ", call, " of ", bytes,
                                       " bytes failed (selected call ", n, ")"),
                        bytes);
  }
  throw cuda_error(injected_code, "injected_fault", call, __FILE__, __LINE__,
                   detail::concat("injected fault (", to_string(k), ", selected call ", n, ")"));
}

const device_properties& fault_injecting_device::properties() const noexcept {
  return inner_.properties();
}

memory_info fault_injecting_device::memory() const { return inner_.memory(); }

void* fault_injecting_device::allocate(memory_kind kind, std::size_t bytes) {
  intercept(
      kind == memory_kind::device ? fault_kind::device_allocation : fault_kind::pinned_allocation,
      "allocate", bytes);
  void* p = inner_.allocate(kind, bytes);
  std::lock_guard lock(mutex_);
  outstanding_[kind_index(kind)] += bytes;
  return p;
}

void fault_injecting_device::deallocate(memory_kind kind, void* ptr, std::size_t bytes) {
  inner_.deallocate(kind, ptr, bytes);
  std::lock_guard lock(mutex_);
  outstanding_[kind_index(kind)] -= bytes;
}

void* fault_injecting_device::mapped_device_pointer(void* pinned_host_ptr) const {
  return inner_.mapped_device_pointer(pinned_host_ptr);
}

void fault_injecting_device::register_host_memory(void* ptr, std::size_t bytes, bool read_only) {
  intercept(fault_kind::pinned_allocation, "register_host_memory");
  inner_.register_host_memory(ptr, bytes, read_only);
}

void fault_injecting_device::unregister_host_memory(void* ptr) {
  inner_.unregister_host_memory(ptr);
}

stream_ref fault_injecting_device::create_stream(stream_priority priority) {
  intercept(fault_kind::create, "create_stream");
  return inner_.create_stream(priority);
}

void fault_injecting_device::destroy_stream(stream_ref s) noexcept { inner_.destroy_stream(s); }

void fault_injecting_device::synchronize(stream_ref s) { inner_.synchronize(s); }

event_ref fault_injecting_device::create_timed_event() {
  intercept(fault_kind::create, "create_timed_event");
  return inner_.create_timed_event();
}

std::optional<std::chrono::nanoseconds> fault_injecting_device::elapsed(event_ref from,
                                                                        event_ref to) {
  return inner_.elapsed(from, to);
}

event_ref fault_injecting_device::create_event() {
  intercept(fault_kind::create, "create_event");
  return inner_.create_event();
}

void fault_injecting_device::destroy_event(event_ref e) noexcept { inner_.destroy_event(e); }

void fault_injecting_device::record(event_ref e, stream_ref s) {
  intercept(fault_kind::event_record, "record");
  inner_.record(e, s);
}

void fault_injecting_device::wait(event_ref e, stream_ref s) {
  intercept(fault_kind::stream_wait, "wait");
  inner_.wait(e, s);
}

bool fault_injecting_device::query(event_ref e) { return inner_.query(e); }

void fault_injecting_device::synchronize(event_ref e) { inner_.synchronize(e); }

void fault_injecting_device::copy_async(void* dst, const void* src, std::size_t bytes,
                                        copy_direction direction, stream_ref s) {
  intercept(fault_kind::copy, "copy_async", bytes);
  inner_.copy_async(dst, src, bytes, direction, s);
}

void fault_injecting_device::launch_host_func(std::function<void()> fn, stream_ref s) {
  intercept(fault_kind::kernel, "launch_host_func");
  inner_.launch_host_func(std::move(fn), s);
}

void fault_injecting_device::checksum_async(const void* ptr, std::size_t bytes,
                                            std::uint64_t* result, stream_ref s) {
  intercept(fault_kind::kernel, "checksum_async", bytes);
  inner_.checksum_async(ptr, bytes, result, s);
}

void fault_injecting_device::fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed,
                                                stream_ref s) {
  intercept(fault_kind::kernel, "fill_pattern_async", bytes);
  inner_.fill_pattern_async(ptr, bytes, seed, s);
}

void fault_injecting_device::decode_weights_async(const void* wire, std::size_t wire_bytes,
                                                  void* dst, std::size_t dst_bytes,
                                                  std::uint32_t* status, stream_ref s) {
  intercept(fault_kind::kernel, "decode_weights_async", dst_bytes);
  inner_.decode_weights_async(wire, wire_bytes, dst, dst_bytes, status, s);
}

void fault_injecting_device::write_value_async(std::uint32_t* word, std::uint32_t value,
                                               stream_ref s) {
  intercept(fault_kind::value_write, "write_value_async");
  inner_.write_value_async(word, value, s);
}

void fault_injecting_device::wait_value_async(const std::uint32_t* word, std::uint32_t value,
                                              stream_ref s) {
  intercept(fault_kind::stream_wait, "wait_value_async");
  inner_.wait_value_async(word, value, s);
}

void fault_injecting_device::write_value(std::uint32_t* word, std::uint32_t value) {
  inner_.write_value(word, value);
}

void fault_injecting_device::verify_checksum_async(const void* ptr, std::size_t bytes,
                                                   std::uint64_t expected, std::uint32_t* counters,
                                                   stream_ref s) {
  intercept(fault_kind::kernel, "verify_checksum_async", bytes);
  inner_.verify_checksum_async(ptr, bytes, expected, counters, s);
}

void fault_injecting_device::synchronize_all() { inner_.synchronize_all(); }

void fault_injecting_device::begin_capture(stream_ref s) { inner_.begin_capture(s); }

graph_ref fault_injecting_device::end_capture(stream_ref s) { return inner_.end_capture(s); }

void fault_injecting_device::launch_graph(graph_ref g, stream_ref s) {
  intercept(fault_kind::kernel, "launch_graph");
  inner_.launch_graph(g, s);
}

void fault_injecting_device::destroy_graph(graph_ref g) noexcept { inner_.destroy_graph(g); }

bool fault_injecting_device::is_capturing(stream_ref s) { return inner_.is_capturing(s); }

}  // namespace htp
