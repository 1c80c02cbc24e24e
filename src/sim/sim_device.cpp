// The sim backend's device, part one: construction and memory (host memory with capacity limits,
// timing-only address space, registrations) and the checks copies make of their ranges. Streams,
// events, work and capture are in sim_device_work.cpp. See include/htp/sim_device.hpp.
#include "sim/sim_device.hpp"

#include <htp/detail/check.hpp>
#include <htp/detail/host_function.hpp>

#include "sim/portable_pinned.hpp"

#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

namespace htp::sim {
namespace {

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

using allocation = detail::allocation_registry::entry;

}  // namespace

sim_device::sim_device(const sim_config& config)
    : config_(config), h2d_(config.h2d_bytes_per_second, config.copy_latency_ns),
      d2h_(config.d2h_bytes_per_second, config.copy_latency_ns) {
  HTP_EXPECTS(config.device_memory_bytes > 0, invalid_argument,
              "sim_config.device_memory_bytes is 0; give the simulated HBM a capacity");
  HTP_EXPECTS(config.copy_engines >= 1, invalid_argument, "sim_config.copy_engines is ",
              config.copy_engines, "; it must be at least 1");
  HTP_EXPECTS(config.decode_bytes_per_second > 0, invalid_argument,
              "sim_config.decode_bytes_per_second is 0; give the modelled decode a rate");
  HTP_EXPECTS(
      !config.timing_only || config.timing_only_real_below >= (std::size_t{64} << 10),
      invalid_argument, "sim_config.timing_only_real_below is ", config.timing_only_real_below,
      "; it must be at least 65536, so htp's completion words (4 KiB blocks) stay real memory");
  props_.kind = backend::sim;
  props_.name = "htp sim device";
  props_.ordinal = config.ordinal;
  props_.pci_bus_id = config.pci_bus_id;
  props_.numa_node = config.numa_node;
  props_.timing_only = config.timing_only;
  if (config.timing_only) props_.name = "htp sim device (timing-only)";
  props_.total_memory = config.device_memory_bytes;
  props_.copy_engines = config.copy_engines;
}

sim_device::~sim_device() {
  // Streams, events and graphs the caller leaked die with the device; their threads must be
  // joined. Streams first: a stream waiting on a replay's lanes drains while they still run.
  std::lock_guard lock(objects_mutex_);
  streams_.clear();
  graphs_.clear();
  allocations_.for_each([this](void* p, const allocation& a) {
    if (a.kind == memory_kind::pinned_host) portable_pinned::remove(p, a.bytes);
    release_memory(p, round_up(a.bytes, alignment));
  });
  for (const auto& [p, r] : registered_) portable_pinned::remove(p, r.bytes);
}

memory_info sim_device::memory() const {
  detail::check_not_in_host_function("memory");
  std::lock_guard lock(memory_mutex_);
  return {config_.device_memory_bytes - used_[0], config_.device_memory_bytes};
}

void* sim_device::allocate(memory_kind kind, std::size_t bytes) {
  detail::check_not_in_host_function("allocate");
  check_thread_not_capturing("allocate");
  HTP_EXPECTS(bytes > 0, invalid_argument, "allocate(", to_string(kind),
              ", 0 bytes): a request must be at least one byte");
  const std::size_t rounded = round_up(bytes, alignment);
  const std::size_t cap = capacity(kind);
  {
    std::lock_guard lock(memory_mutex_);
    const std::size_t used = used_[index(kind)];
    if (cap != 0 && (rounded > cap || used > cap - rounded)) {
      throw out_of_memory(
          detail::concat("sim device: cannot allocate ", bytes, " bytes of ", to_string(kind),
                         " memory: ", used, " of ", cap, " bytes in use, ", cap - used,
                         " free. Give the sim device more memory (sim_config) or ask for less."),
          bytes);
    }
    used_[index(kind)] += rounded;
  }
  void* p = nullptr;
  if (address_space_only(kind, rounded)) {
    void* m = mmap(nullptr, rounded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) {
      p = m;
      std::lock_guard lock(mapped_mutex_);
      mapped_.insert(p);
    }
  } else {
    p = std::aligned_alloc(alignment, rounded);
  }
  if (p == nullptr) {
    std::lock_guard lock(memory_mutex_);
    used_[index(kind)] -= rounded;
    throw out_of_memory(detail::concat("sim device: the host could not provide ", bytes,
                                       " bytes for ", to_string(kind), " memory"),
                        bytes);
  }
  if (kind == memory_kind::device && config_.poison_byte >= 0 && !config_.timing_only) {
    std::memset(p, config_.poison_byte, rounded);
  }
  std::lock_guard lock(memory_mutex_);
  allocations_.add(p, bytes, kind);
  if (kind == memory_kind::pinned_host) portable_pinned::add(p, bytes);
  return p;
}

void sim_device::deallocate(memory_kind kind, void* ptr, std::size_t bytes) {
  detail::check_not_in_host_function("deallocate");
  check_thread_not_capturing("deallocate");
  {
    std::lock_guard lock(memory_mutex_);
    allocations_.remove(kind, ptr, bytes);
    used_[index(kind)] -= round_up(bytes, alignment);
  }
  if (kind == memory_kind::pinned_host) {
    portable_pinned::remove(ptr, bytes);
    forget_writes(ptr, bytes);
  }
  release_memory(ptr, round_up(bytes, alignment));
}

void* sim_device::mapped_device_pointer(void* pinned_host_ptr) const {
  detail::check_not_in_host_function("mapped_device_pointer");
  // Pinned memory is portable (as cudaHostAllocPortable makes it): this device's allocations and
  // registrations are in the process-wide set with every other sim device's.
  HTP_EXPECTS(portable_pinned::contains(pinned_host_ptr, 1), invalid_argument,
              "mapped_device_pointer(", pinned_host_ptr,
              "): not inside pinned host memory allocated from (or registered with) any device");
  return pinned_host_ptr;
}

void sim_device::register_host_memory(void* ptr, std::size_t bytes, bool read_only) {
  detail::check_not_in_host_function("register_host_memory");
  check_thread_not_capturing("register_host_memory");
  HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "register_host_memory(", ptr, ", ",
              bytes, "): give a non-null range of at least one byte");
  std::lock_guard lock(memory_mutex_);
  const auto* b = static_cast<const char*>(ptr);
  auto next = registered_.lower_bound(ptr);
  const bool overlaps_next =
      next != registered_.end() && static_cast<const char*>(next->first) < b + bytes;
  const bool overlaps_prev =
      next != registered_.begin() &&
      static_cast<const char*>(std::prev(next)->first) + std::prev(next)->second.bytes > b;
  HTP_EXPECTS(!overlaps_next && !overlaps_prev, invalid_argument, "register_host_memory(", ptr,
              ", ", bytes,
              "): the range overlaps one already registered; register each range once");
  HTP_EXPECTS(allocations_.find_containing(ptr, 1) == nullptr, invalid_argument,
              "register_host_memory(", ptr, "): the range is memory this device allocated");
  registered_.emplace(ptr, registration{bytes, read_only});
  portable_pinned::add(ptr, bytes);
}

void sim_device::unregister_host_memory(void* ptr) {
  detail::check_not_in_host_function("unregister_host_memory");
  check_thread_not_capturing("unregister_host_memory");
  std::lock_guard lock(memory_mutex_);
  const auto it = registered_.find(ptr);
  HTP_EXPECTS(it != registered_.end(), invalid_argument, "unregister_host_memory(", ptr,
              "): not the start of a range registered with register_host_memory");
  portable_pinned::remove(ptr, it->second.bytes);
  registered_.erase(it);
}

std::size_t sim_device::pinned_bytes_in_use() const {
  std::lock_guard lock(memory_mutex_);
  return used_[index(memory_kind::pinned_host)];
}

/// Timing-only: device memory, and pinned memory from timing_only_real_below up, is address
/// space alone.
bool sim_device::address_space_only(memory_kind kind, std::size_t rounded) const noexcept {
  return config_.timing_only &&
         (kind == memory_kind::device || rounded >= config_.timing_only_real_below);
}

void sim_device::release_memory(void* p, std::size_t rounded) {
  bool mapped = false;
  {
    std::lock_guard lock(mapped_mutex_);
    mapped = mapped_.erase(p) == 1;
  }
  if (mapped) {
    munmap(p, rounded);
  } else {
    std::free(p);
  }
}

// Value words inside freed pinned memory are words no more: their writes are forgotten.
void sim_device::forget_writes(const void* ptr, std::size_t bytes) {
  const auto* lo = static_cast<const std::uint32_t*>(ptr);
  const auto* hi = reinterpret_cast<const std::uint32_t*>(static_cast<const char*>(ptr) + bytes);
  std::lock_guard lock(values_mutex_);
  writes_.erase(writes_.lower_bound(lo), writes_.lower_bound(hi));
}

void sim_device::check_word(const std::uint32_t* word) const {
  std::lock_guard lock(memory_mutex_);
  const allocation* a = allocations_.find_containing(word, sizeof(std::uint32_t));
  HTP_EXPECTS(a != nullptr && a->kind == memory_kind::pinned_host &&
                  reinterpret_cast<std::uintptr_t>(word) % alignof(std::uint32_t) == 0,
              invalid_argument, "stream value word ", static_cast<const void*>(word),
              " must be an aligned 32-bit word inside pinned host memory of this device");
}

/// Whether a host side of the copy is pageable: not pinned memory of any sim device and not
/// registered with one (portable_pinned, as CUDA's portable pinned set).
bool sim_device::pageable_host_side(const void* dst, const void* src, std::size_t bytes,
                                    copy_direction d) {
  const bool dst_host = d == copy_direction::device_to_host || d == copy_direction::host_to_host;
  const bool src_host = d == copy_direction::host_to_device || d == copy_direction::host_to_host;
  return (dst_host && !portable_pinned::contains(dst, bytes)) ||
         (src_host && !portable_pinned::contains(src, bytes));
}

/// Checks what a GPU would reject (and some it would silently corrupt): nulls, zero size,
/// overlap, and a device-side range that is not inside one device allocation.
void sim_device::validate_copy(void* dst, const void* src, std::size_t bytes,
                               copy_direction d) const {
  detail::check_copy_args(dst, src, bytes, to_string(d));
  const bool dst_device =
      d == copy_direction::host_to_device || d == copy_direction::device_to_device;
  const bool src_device =
      d == copy_direction::device_to_host || d == copy_direction::device_to_device;
  std::lock_guard lock(memory_mutex_);
  check_side("destination", dst, bytes, dst_device, d);
  check_side("source", src, bytes, src_device, d);
}

void sim_device::check_side(const char* side, const void* p, std::size_t bytes, bool must_be_device,
                            copy_direction d) const {
  const allocation* a = allocations_.find_containing(p, bytes);
  if (must_be_device) {
    HTP_EXPECTS(a != nullptr && a->kind == memory_kind::device, invalid_argument, "copy_async ",
                to_string(d), ": the ", side, " range [", p, ", +", bytes,
                ") is not inside one device allocation of this device");
  } else {
    HTP_EXPECTS(a == nullptr || a->kind != memory_kind::device, invalid_argument, "copy_async ",
                to_string(d), ": the ", side, " ", p, " is device memory; use a direction whose ",
                side, " side is the device");
  }
}

}  // namespace htp::sim

namespace htp {

std::unique_ptr<device> make_sim_device(const sim_config& config) {
  return std::make_unique<sim::sim_device>(config);
}

std::size_t sim_blocked_enqueues(const device& d) {
  const auto* s = dynamic_cast<const sim::sim_device*>(&d);
  HTP_EXPECTS(
      s != nullptr, invalid_argument,
      "sim_blocked_enqueues: the device is not a sim device (make it with make_sim_device)");
  return s->blocked_enqueues();
}

std::size_t sim_pinned_bytes_in_use(const device& d) {
  const auto* s = dynamic_cast<const sim::sim_device*>(&d);
  HTP_EXPECTS(
      s != nullptr, invalid_argument,
      "sim_pinned_bytes_in_use: the device is not a sim device (make it with make_sim_device)");
  return s->pinned_bytes_in_use();
}

}  // namespace htp
