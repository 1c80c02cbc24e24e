// The sim backend's device class (private to src/sim/): memory from the host with capacity limits
// (sim_device.cpp), streams as worker threads, events as completion signals, copies through a
// modelled link, stream capture and graphs (sim_device_work.cpp, sim_graph.hpp). See
// include/htp/sim_device.hpp.
#pragma once

#include <htp/detail/allocation_registry.hpp>
#include <htp/sim_device.hpp>

#include "sim/sim_graph.hpp"
#include "sim/sim_link.hpp"
#include "sim/sim_stream.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace htp::sim {

class sim_device final : public device {
 public:
  explicit sim_device(const sim_config& config);
  ~sim_device() override;

  // ---- memory (sim_device.cpp) ----
  const device_properties& properties() const noexcept override { return props_; }
  memory_info memory() const override;
  void* allocate(memory_kind kind, std::size_t bytes) override;
  void deallocate(memory_kind kind, void* ptr, std::size_t bytes) override;
  void* mapped_device_pointer(void* pinned_host_ptr) const override;
  void register_host_memory(void* ptr, std::size_t bytes, bool read_only) override;
  void unregister_host_memory(void* ptr) override;

  /// Threads blocked on a full stream queue now.
  std::size_t blocked_enqueues() const noexcept { return blocked_enqueues_.load(); }
  /// Bytes of pinned host memory allocated now (registered caller memory not counted).
  std::size_t pinned_bytes_in_use() const;

  // ---- streams, events, work, capture (sim_device_work.cpp) ----
  stream_ref create_stream(stream_priority) override;
  void destroy_stream(stream_ref s) noexcept override;
  void synchronize(stream_ref s) override;
  event_ref create_event() override;
  event_ref create_timed_event() override;
  std::optional<std::chrono::nanoseconds> elapsed(event_ref from, event_ref to) override;
  void destroy_event(event_ref e) noexcept override;
  void record(event_ref e, stream_ref s) override;
  void wait(event_ref e, stream_ref s) override;
  bool query(event_ref e) override;
  void synchronize(event_ref e) override;
  void copy_async(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                  stream_ref s) override;
  void launch_host_func(std::function<void()> fn, stream_ref s) override;
  void checksum_async(const void* ptr, std::size_t bytes, std::uint64_t* result,
                      stream_ref s) override;
  void fill_pattern_async(void* ptr, std::size_t bytes, std::uint64_t seed, stream_ref s) override;
  using device::decode_weights_async;
  void decode_weights_async(const void* wire, std::size_t wire_bytes, void* dst,
                            std::size_t dst_bytes, std::uint32_t* status, stream_ref s) override;
  void write_value_async(std::uint32_t* word, std::uint32_t value, stream_ref s) override;
  void wait_value_async(const std::uint32_t* word, std::uint32_t value, stream_ref s) override;
  void write_value(std::uint32_t* word, std::uint32_t value) override;
  void verify_checksum_async(const void* ptr, std::size_t bytes, std::uint64_t expected,
                             std::uint32_t* counters, stream_ref s) override;
  void synchronize_all() override;
  void begin_capture(stream_ref s) override;
  graph_ref end_capture(stream_ref s) override;
  void launch_graph(graph_ref g, stream_ref s) override;
  void destroy_graph(graph_ref g) noexcept override;
  bool is_capturing(stream_ref s) override;

 private:
  // memory helpers (sim_device.cpp)
  static std::size_t index(memory_kind k) { return k == memory_kind::device ? 0 : 1; }
  std::size_t capacity(memory_kind k) const {
    return k == memory_kind::device ? config_.device_memory_bytes : config_.pinned_memory_bytes;
  }
  bool address_space_only(memory_kind kind, std::size_t rounded) const noexcept;
  void release_memory(void* p, std::size_t rounded);
  void forget_writes(const void* ptr, std::size_t bytes);
  void check_word(const std::uint32_t* word) const;
  static bool pageable_host_side(const void* dst, const void* src, std::size_t bytes,
                                 copy_direction d);
  void validate_copy(void* dst, const void* src, std::size_t bytes, copy_direction d) const;
  void check_side(const char* side, const void* p, std::size_t bytes, bool must_be_device,
                  copy_direction d) const;

  // stream, event and capture helpers (sim_device_work.cpp)
  stream& get(stream_ref s);
  event& get(event_ref e);
  event_ref make_event(bool timed);
  void store_value(std::uint32_t* word, std::uint32_t value,
                   std::chrono::steady_clock::time_point at);
  /// Queues `task` on `s`, or records it as a node when `s` is capturing. Returns whether it was
  /// queued. @throws htp::logic_error if the capture of `s` is invalidated.
  bool submit(stream_ref s, std::function<void()> task);
  /// The capture `s` belongs to, or null. Capture mutex held.
  std::shared_ptr<capture> capture_of(stream* s) const;
  /// Invalidates `c` and throws htp::logic_error: `call` was refused during its capture.
  [[noreturn]] static void refuse(capture& c, const std::string& call, const char* cuda_name,
                                  const std::string& why);
  /// Refuses `call` if this thread began a capture still active (ThreadLocal mode's "potentially
  /// unsafe API calls").
  void check_thread_not_capturing(const char* call);
  void wait_captured(stream& st, const capture_point& point);

  sim_config config_;
  device_properties props_;
  link h2d_;
  link d2h_;
  error_sink errors_;
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
  std::map<void*, std::unique_ptr<stream>> streams_;
  std::map<void*, std::unique_ptr<event>> events_;
  std::map<void*, std::unique_ptr<graph>> graphs_;

  mutable std::mutex capture_mutex_;  // guards capturing_ and every capture's state
  std::map<stream*, std::shared_ptr<capture>> capturing_;  // each capturing stream's capture
};

}  // namespace htp::sim
