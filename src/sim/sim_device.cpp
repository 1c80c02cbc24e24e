// The sim backend's device: memory from the host with capacity limits, streams as worker threads,
// events as completion signals, copies through a modelled link. See include/htp/sim_device.hpp.
#include <htp/checksum.hpp>
#include <htp/codec.hpp>
#include <htp/detail/allocation_registry.hpp>
#include <htp/detail/check.hpp>
#include <htp/detail/host_function.hpp>
#include <htp/sim_device.hpp>

#include <htp/detail/codec_format.hpp>
#include "sim/portable_pinned.hpp"
#include "sim/sim_link.hpp"
#include "sim/sim_stream.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <sys/mman.h>

namespace htp {
namespace {

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

using allocation = detail::allocation_registry::entry;

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

class sim_device final : public device {
 public:
  explicit sim_device(const sim_config& config)
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

  ~sim_device() override {
    // Streams and events the caller leaked die with the device; their threads must be joined.
    std::lock_guard lock(objects_mutex_);
    streams_.clear();
    allocations_.for_each([this](void* p, const allocation& a) {
      if (a.kind == memory_kind::pinned_host) sim::portable_pinned::remove(p, a.bytes);
      release_memory(p, round_up(a.bytes, alignment));
    });
    for (const auto& [p, r] : registered_) sim::portable_pinned::remove(p, r.bytes);
  }

  const device_properties& properties() const noexcept override { return props_; }

  memory_info memory() const override {
    detail::check_not_in_host_function("memory");
    std::lock_guard lock(memory_mutex_);
    return {config_.device_memory_bytes - used_[0], config_.device_memory_bytes};
  }

  void* allocate(memory_kind kind, std::size_t bytes) override {
    detail::check_not_in_host_function("allocate");
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
      void* m =
          mmap(nullptr, rounded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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
    if (kind == memory_kind::pinned_host) sim::portable_pinned::add(p, bytes);
    return p;
  }

  void deallocate(memory_kind kind, void* ptr, std::size_t bytes) override {
    detail::check_not_in_host_function("deallocate");
    {
      std::lock_guard lock(memory_mutex_);
      allocations_.remove(kind, ptr, bytes);
      used_[index(kind)] -= round_up(bytes, alignment);
    }
    if (kind == memory_kind::pinned_host) {
      sim::portable_pinned::remove(ptr, bytes);
      forget_writes(ptr, bytes);
    }
    release_memory(ptr, round_up(bytes, alignment));
  }

  void* mapped_device_pointer(void* pinned_host_ptr) const override {
    detail::check_not_in_host_function("mapped_device_pointer");
    // Pinned memory is portable (as cudaHostAllocPortable makes it): this device's allocations and
    // registrations are in the process-wide set with every other sim device's.
    HTP_EXPECTS(sim::portable_pinned::contains(pinned_host_ptr, 1), invalid_argument,
                "mapped_device_pointer(", pinned_host_ptr,
                "): not inside pinned host memory allocated from (or registered with) any device");
    return pinned_host_ptr;
  }

  void register_host_memory(void* ptr, std::size_t bytes, bool read_only) override {
    detail::check_not_in_host_function("register_host_memory");
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
    sim::portable_pinned::add(ptr, bytes);
  }

  void unregister_host_memory(void* ptr) override {
    detail::check_not_in_host_function("unregister_host_memory");
    std::lock_guard lock(memory_mutex_);
    const auto it = registered_.find(ptr);
    HTP_EXPECTS(it != registered_.end(), invalid_argument, "unregister_host_memory(", ptr,
                "): not the start of a range registered with register_host_memory");
    sim::portable_pinned::remove(ptr, it->second.bytes);
    registered_.erase(it);
  }

  /// Bytes of pinned host memory allocated now (registered caller memory not counted).
  std::size_t blocked_enqueues() const noexcept { return blocked_enqueues_.load(); }

  std::size_t pinned_bytes_in_use() const {
    std::lock_guard lock(memory_mutex_);
    return used_[index(memory_kind::pinned_host)];
  }

  stream_ref create_stream(stream_priority) override {
    detail::check_not_in_host_function("create_stream");
    auto s = std::make_unique<sim::stream>(errors_, config_.stream_queue_limit, &blocked_enqueues_);
    stream_ref ref{s.get()};
    std::lock_guard lock(objects_mutex_);
    streams_.emplace(s.get(), std::move(s));
    return ref;
  }

  void destroy_stream(stream_ref s) noexcept override {
    std::unique_ptr<sim::stream> owned;
    {
      std::lock_guard lock(objects_mutex_);
      auto it = streams_.find(s.native);
      if (it == streams_.end()) return;
      owned = std::move(it->second);
      streams_.erase(it);
    }
    owned.reset();  // drains and joins outside the lock
  }

  void synchronize(stream_ref s) override {
    detail::check_not_in_host_function("synchronize");
    get(s).synchronize();
    errors_.rethrow();
  }

  event_ref create_event() override {
    detail::check_not_in_host_function("create_event");
    return make_event(false);
  }
  event_ref create_timed_event() override {
    detail::check_not_in_host_function("create_timed_event");
    return make_event(true);
  }

  std::optional<std::chrono::nanoseconds> elapsed(event_ref from, event_ref to) override {
    detail::check_not_in_host_function("elapsed");
    sim::event& a = get(from);
    sim::event& b = get(to);
    HTP_EXPECTS(a.timed() && b.timed(), invalid_argument,
                "elapsed: both events must come from create_timed_event (as CUDA refuses events "
                "made without timing)");
    const auto sa = a.current(), sb = b.current();
    if (!sa || !sb) return std::nullopt;
    const auto ta = sa->set_at(), tb = sb->set_at();
    if (!ta || !tb) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(*tb - *ta);
  }

  void destroy_event(event_ref e) noexcept override {
    std::lock_guard lock(objects_mutex_);
    events_.erase(e.native);
  }

  void record(event_ref e, stream_ref s) override {
    detail::check_not_in_host_function("record");
    auto& st = get(s);
    auto sig = get(e).arm();
    st.enqueue([sig] {
      // Instantaneous on a GPU: it completes when the stream reaches it (modelled time).
      const auto at = sim::current_task_ready_time();
      sig->set(at);
      sim::set_current_task_completion(at);
    });
  }

  void wait(event_ref e, stream_ref s) override {
    detail::check_not_in_host_function("wait");
    auto& st = get(s);
    auto sig = get(e).current();
    if (!sig) return;  // never recorded: no-op, as in CUDA
    st.enqueue([sig] {
      sig->wait();
      // On a GPU a satisfied wait costs nothing: the stream goes on at the later of reaching the
      // wait and the awaited event's modelled time, not when this worker thread got round to it
      // (which on a loaded host, or under a sanitizer, is many microseconds later).
      sim::set_current_task_completion(std::max(sim::current_task_ready_time(), *sig->set_at()));
    });
  }

  bool query(event_ref e) override {
    detail::check_not_in_host_function("query");
    auto sig = get(e).current();
    return !sig || sig->is_set();
  }

  void synchronize(event_ref e) override {
    detail::check_not_in_host_function("synchronize");
    if (auto sig = get(e).current()) sig->wait();
    errors_.rethrow();
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                  stream_ref s) override {
    detail::check_not_in_host_function("copy_async");
    validate_copy(dst, src, bytes, direction);
    auto& st = get(s);
    sim::link* l = direction == copy_direction::host_to_device   ? &h2d_
                   : direction == copy_direction::device_to_host ? &d2h_
                                                                 : nullptr;
    const bool move_bytes = !config_.timing_only;
    st.enqueue([dst, src, bytes, l, move_bytes] {
      const auto done =
          l ? l->reserve(bytes, sim::current_task_ready_time()) : sim::link::clock::time_point{};
      if (move_bytes) std::memcpy(dst, src, bytes);
      if (l && l->modelled()) {
        std::this_thread::sleep_until(done);  // the modelled link's pace
        sim::set_current_task_completion(done);
      }
    });
    // CUDA stages a copy to or from pageable host memory through its own pinned buffers, so
    // cudaMemcpyAsync may return only once the stream has reached the copy and moved the bytes
    // ("API synchronization behavior"); the sim always does, so a caller that issues one on a
    // held stream blocks here as it would on a GPU.
    if (pageable_host_side(dst, src, bytes, direction)) st.synchronize();
  }

  void launch_host_func(std::function<void()> fn, stream_ref s) override {
    detail::check_not_in_host_function("launch_host_func");
    HTP_EXPECTS(static_cast<bool>(fn), invalid_argument, "launch_host_func: empty function");
    get(s).enqueue([fn = std::move(fn)] {
      const detail::host_function_scope inside;  // device calls from fn are refused
      fn();
    });
  }

  void checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                      stream_ref s) override {
    detail::check_not_in_host_function("checksum_async");
    HTP_EXPECTS(ptr != nullptr && result != nullptr && bytes > 0, invalid_argument,
                "checksum_async(", ptr, ", ", bytes, ", ", result,
                "): pointers must be non-null and bytes positive");
    if (config_.timing_only) {
      get(s).enqueue([result] { *result = 0; });  // no bytes to sum: checksums are off
      return;
    }
    get(s).enqueue([ptr, bytes, result] { *result = checksum(ptr, bytes); });
  }

  void fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed, stream_ref s) override {
    detail::check_not_in_host_function("fill_pattern_async");
    HTP_EXPECTS(ptr != nullptr && bytes > 0, invalid_argument, "fill_pattern_async(", ptr, ", ",
                bytes, "): pointer must be non-null and bytes positive");
    if (config_.timing_only) {
      get(s).enqueue([] {});  // keeps stream order; nothing to write
      return;
    }
    get(s).enqueue([ptr, bytes, seed] { fill_pattern(ptr, bytes, seed); });
  }

  using device::decode_weights_async;
  void decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                            std::size_t dst_bytes, std::uint32_t* status, stream_ref s) override {
    detail::check_not_in_host_function("decode_weights_async");
    HTP_EXPECTS(wire != nullptr && dst != nullptr && wire_bytes > 0 && dst_bytes > 0,
                invalid_argument, "decode_weights_async(", wire, ", ", wire_bytes, ", ", dst, ", ",
                dst_bytes, "): pointers must be non-null and sizes positive");
    if (status != nullptr) check_word(status);
    if (!config_.timing_only && status == nullptr) {
      // A corrupt frame throws htp::corrupt_data on the worker: the stream's sticky error.
      get(s).enqueue(
          [wire, wire_bytes, dst, dst_bytes] { decode_weights(wire, wire_bytes, dst, dst_bytes); });
      return;
    }
    if (!config_.timing_only) {
      get(s).enqueue([wire, wire_bytes, dst, dst_bytes, status] {
        *status = static_cast<std::uint32_t>(verified_decode(wire, wire_bytes, dst, dst_bytes));
      });
      return;
    }
    const auto rate = config_.decode_bytes_per_second;
    get(s).enqueue([dst_bytes, rate, status] {
      const auto ns = static_cast<std::int64_t>(static_cast<double>(dst_bytes) * 1e9 /
                                                static_cast<double>(rate));
      const auto done = sim::current_task_ready_time() + std::chrono::nanoseconds(ns);
      std::this_thread::sleep_until(done);  // the modelled kernel's duration
      sim::set_current_task_completion(done);
      if (status != nullptr) *status = 0;  // no bytes to verify
    });
  }

  void write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) override {
    detail::check_not_in_host_function("write_value_async");
    check_word(word);
    get(s).enqueue([this, word, value] {
      const auto at = sim::current_task_ready_time();  // instantaneous on a GPU
      store_value(word, value, at);
      sim::set_current_task_completion(at);
    });
  }

  void wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) override {
    detail::check_not_in_host_function("wait_value_async");
    check_word(word);
    get(s).enqueue([this, word, value] {
      std::unique_lock lock(values_mutex_);
      const auto reached = [&](std::uint32_t v) {
        return static_cast<std::int32_t>(v - value) >= 0;
      };
      values_cv_.wait(lock, [&] { return reached(__atomic_load_n(word, __ATOMIC_ACQUIRE)); });
      // Like an event wait: the stream goes on at the later of reaching the wait and the modelled
      // time of the write that satisfied it (the earliest remembered one that does; none: it was
      // written long before).
      auto at = sim::current_task_ready_time();
      if (auto w = writes_.find(word); w != writes_.end()) {
        for (const auto& [v, t] : w->second) {
          if (reached(v)) {
            at = std::max(at, t);
            break;
          }
        }
      }
      sim::set_current_task_completion(at);
    });
  }

  void write_value(std::uint32_t* word, std::uint32_t value) override {
    store_value(word, value, std::chrono::steady_clock::now());
  }

  void synchronize_all() override {
    detail::check_not_in_host_function("synchronize_all");
    std::vector<sim::stream*> all;
    {
      std::lock_guard lock(objects_mutex_);
      for (auto& [key, st] : streams_) all.push_back(st.get());
    }
    for (auto* st : all) st->synchronize();
    errors_.rethrow();
  }

 private:
  static std::size_t index(memory_kind k) { return k == memory_kind::device ? 0 : 1; }
  std::size_t capacity(memory_kind k) const {
    return k == memory_kind::device ? config_.device_memory_bytes : config_.pinned_memory_bytes;
  }

  /// Timing-only: device memory, and pinned memory from timing_only_real_below up, is address
  /// space alone.
  bool address_space_only(memory_kind kind, std::size_t rounded) const noexcept {
    return config_.timing_only &&
           (kind == memory_kind::device || rounded >= config_.timing_only_real_below);
  }

  void release_memory(void* p, std::size_t rounded) {
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

  sim::stream& get(stream_ref s) {
    detail::check_stream_handle(s.native, "sim device");  // what cuda refuses, refused the same way
    std::lock_guard lock(objects_mutex_);
    auto it = streams_.find(s.native);
    HTP_EXPECTS(it != streams_.end(), invalid_argument, "stream ", s.native,
                " was not created by this sim device (or was destroyed)");
    return *it->second;
  }

  event_ref make_event(bool timed) {
    auto e = std::make_unique<sim::event>(timed);
    event_ref ref{e.get()};
    std::lock_guard lock(objects_mutex_);
    events_.emplace(e.get(), std::move(e));
    return ref;
  }

  sim::event& get(event_ref e) {
    std::lock_guard lock(objects_mutex_);
    auto it = events_.find(e.native);
    HTP_EXPECTS(it != events_.end(), invalid_argument, "event ", e.native,
                " was not created by this sim device (or was destroyed)");
    return *it->second;
  }

  // Writes a value word at modelled time `at`, remembering the last few writes' times.
  void store_value(std::uint32_t* word, std::uint32_t value,
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

  // Value words inside freed pinned memory are words no more: their writes are forgotten.
  void forget_writes(const void* ptr, std::size_t bytes) {
    const auto* lo = static_cast<const std::uint32_t*>(ptr);
    const auto* hi = reinterpret_cast<const std::uint32_t*>(static_cast<const char*>(ptr) + bytes);
    std::lock_guard lock(values_mutex_);
    writes_.erase(writes_.lower_bound(lo), writes_.lower_bound(hi));
  }

  void check_word(const std::uint32_t* word) const {
    std::lock_guard lock(memory_mutex_);
    const allocation* a = allocations_.find_containing(word, sizeof(std::uint32_t));
    HTP_EXPECTS(a != nullptr && a->kind == memory_kind::pinned_host &&
                    reinterpret_cast<std::uintptr_t>(word) % alignof(std::uint32_t) == 0,
                invalid_argument, "stream value word ", static_cast<const void*>(word),
                " must be an aligned 32-bit word inside pinned host memory of this device");
  }

  /// Whether a host side of the copy is pageable: not pinned memory of any sim device and not
  /// registered with one (sim::portable_pinned, as CUDA's portable pinned set).
  static bool pageable_host_side(const void* dst, const void* src, std::size_t bytes,
                                 copy_direction d) {
    const bool dst_host = d == copy_direction::device_to_host || d == copy_direction::host_to_host;
    const bool src_host = d == copy_direction::host_to_device || d == copy_direction::host_to_host;
    return (dst_host && !sim::portable_pinned::contains(dst, bytes)) ||
           (src_host && !sim::portable_pinned::contains(src, bytes));
  }

  /// Checks what a GPU would reject (and some it would silently corrupt): nulls, zero size,
  /// overlap, and a device-side range that is not inside one device allocation.
  void validate_copy(void* dst, const void* src, std::size_t bytes, copy_direction d) const {
    HTP_EXPECTS(dst != nullptr && src != nullptr, invalid_argument, "copy_async(", dst, ", ", src,
                ", ", bytes, ", ", to_string(d), "): source and destination must be non-null");
    HTP_EXPECTS(bytes > 0, invalid_argument, "copy_async(", dst, ", ", src,
                ", 0 bytes): a copy must move at least one byte");
    const auto* a = static_cast<const char*>(dst);
    const auto* b = static_cast<const char*>(src);
    HTP_EXPECTS(a + bytes <= b || b + bytes <= a, invalid_argument, "copy_async(", dst, ", ", src,
                ", ", bytes, "): source and destination overlap");
    const bool dst_device =
        d == copy_direction::host_to_device || d == copy_direction::device_to_device;
    const bool src_device =
        d == copy_direction::device_to_host || d == copy_direction::device_to_device;
    std::lock_guard lock(memory_mutex_);
    check_side("destination", dst, bytes, dst_device, d);
    check_side("source", src, bytes, src_device, d);
  }

  void check_side(const char* side, const void* p, std::size_t bytes, bool must_be_device,
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

  sim_config config_;
  device_properties props_;
  sim::link h2d_;
  sim::link d2h_;
  sim::error_sink errors_;
  std::atomic<std::size_t> blocked_enqueues_{0};  // threads blocked on a full stream queue now

  mutable std::mutex memory_mutex_;
  detail::allocation_registry allocations_;
  std::size_t used_[2] = {0, 0};
  struct registration {
    std::size_t bytes;
    bool read_only;
  };
  std::map<void*, registration> registered_;  // caller memory given to register_host_memory
  std::mutex mapped_mutex_;
  std::set<void*> mapped_;  // timing-only allocations made with mmap (freed with munmap)

  std::mutex values_mutex_;  // guards the wake-up of streams waiting on value words
  std::condition_variable values_cv_;
  // The last writes of each value word (value, modelled time), oldest first: the time a wait on
  // the word was satisfied. Words are few and long-lived (a pool's), so the map stays small.
  std::map<const std::uint32_t*,
           std::deque<std::pair<std::uint32_t, std::chrono::steady_clock::time_point>>>
      writes_;

  std::mutex objects_mutex_;
  std::map<void*, std::unique_ptr<sim::stream>> streams_;
  std::map<void*, std::unique_ptr<sim::event>> events_;
};

}  // namespace

std::unique_ptr<device> make_sim_device(const sim_config& config) {
  return std::make_unique<sim_device>(config);
}

std::size_t sim_blocked_enqueues(const device& d) {
  const auto* s = dynamic_cast<const sim_device*>(&d);
  HTP_EXPECTS(
      s != nullptr, invalid_argument,
      "sim_blocked_enqueues: the device is not a sim device (make it with make_sim_device)");
  return s->blocked_enqueues();
}

std::size_t sim_pinned_bytes_in_use(const device& d) {
  const auto* s = dynamic_cast<const sim_device*>(&d);
  HTP_EXPECTS(
      s != nullptr, invalid_argument,
      "sim_pinned_bytes_in_use: the device is not a sim device (make it with make_sim_device)");
  return s->pinned_bytes_in_use();
}

}  // namespace htp
