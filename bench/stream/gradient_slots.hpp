// Two gradient buffers used in turn by the training benches (train_runner, zero2_runner): a layer's
// backward writes one while the reduction of the layer after it (in backward order, the one
// before) still reads the other. Before a backward writes a buffer again, the compute stream waits
// for the reduction that last read it (htp::gradient_reducer's contract: a gradient is not
// written on compute until its reduction is done), so a reduction slower than a layer's backward
// holds the compute stream, as it would on a GPU.
#pragma once

#include <htp/device.hpp>

#include <array>
#include <cstddef>

namespace htp::bench {

class gradient_slots {
 public:
  /// Two device buffers of `bytes` each, and their events. @throws what the device throws.
  gradient_slots(device& dev, std::size_t bytes) : dev_(dev), bytes_(bytes) {
    try {
      for (std::size_t i = 0; i < 2; ++i) {
        buf_[i] = dev.allocate(memory_kind::device, bytes);
        read_[i] = dev.create_event();
      }
    } catch (...) {
      release();
      throw;
    }
  }
  /// Frees the buffers: the streams that used them must have been drained.
  ~gradient_slots() { release(); }
  gradient_slots(const gradient_slots&) = delete;
  gradient_slots& operator=(const gradient_slots&) = delete;

  /// The buffer the next layer's backward writes, once `compute` has waited for the reduction
  /// that last read it (none yet: no wait).
  void* next(stream_ref compute) {
    cur_ = 1 - cur_;
    dev_.wait(read_[cur_], compute);
    return buf_[cur_];
  }
  /// After the reduction of the buffer next() gave was queued on `reduction`: marks its end.
  void reduced(stream_ref reduction) { dev_.record(read_[cur_], reduction); }

 private:
  void release() noexcept {
    for (std::size_t i = 0; i < 2; ++i) {
      if (buf_[i] != nullptr) dev_.deallocate(memory_kind::device, buf_[i], bytes_);
      if (read_[i].native != nullptr) dev_.destroy_event(read_[i]);
    }
  }

  device& dev_;
  std::size_t bytes_;
  std::array<void*, 2> buf_{};
  std::array<event_ref, 2> read_{};
  std::size_t cur_ = 1;
};

}  // namespace htp::bench
