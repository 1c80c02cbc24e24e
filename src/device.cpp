#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>
#include <htp/device.hpp>
#include <htp/sim_device.hpp>

#include <spdlog/spdlog.h>

#include <utility>

namespace htp {

const char* to_string(backend b) noexcept {
  switch (b) {
    case backend::automatic: return "automatic";
    case backend::cuda: return "cuda";
    case backend::sim: return "sim";
  }
  return "?";
}

const char* to_string(memory_kind k) noexcept {
  return k == memory_kind::device ? "device" : "pinned_host";
}

const char* to_string(copy_direction d) noexcept {
  switch (d) {
    case copy_direction::host_to_device: return "H2D";
    case copy_direction::device_to_host: return "D2H";
    case copy_direction::device_to_device: return "D2D";
    case copy_direction::host_to_host: return "H2H";
  }
  return "?";
}

// ---- owning wrappers -------------------------------------------------------------------------

stream::stream(device& dev, stream_priority priority)
    : dev_(&dev), ref_(dev.create_stream(priority)) {}

stream::~stream() {
  if (dev_ != nullptr && ref_) dev_->destroy_stream(ref_);
}

stream::stream(stream&& other) noexcept
    : dev_(std::exchange(other.dev_, nullptr)), ref_(std::exchange(other.ref_, {})) {}

stream& stream::operator=(stream&& other) noexcept {
  if (this != &other) {
    if (dev_ != nullptr && ref_) dev_->destroy_stream(ref_);
    dev_ = std::exchange(other.dev_, nullptr);
    ref_ = std::exchange(other.ref_, {});
  }
  return *this;
}

void stream::synchronize() const {
  HTP_EXPECTS(dev_ != nullptr, logic_error, "synchronize on an empty htp::stream");
  dev_->synchronize(ref_);
}

event::event(device& dev) : dev_(&dev), ref_(dev.create_event()) {}

event::~event() {
  if (dev_ != nullptr && ref_) dev_->destroy_event(ref_);
}

event::event(event&& other) noexcept
    : dev_(std::exchange(other.dev_, nullptr)), ref_(std::exchange(other.ref_, {})) {}

event& event::operator=(event&& other) noexcept {
  if (this != &other) {
    if (dev_ != nullptr && ref_) dev_->destroy_event(ref_);
    dev_ = std::exchange(other.dev_, nullptr);
    ref_ = std::exchange(other.ref_, {});
  }
  return *this;
}

void event::record(stream_ref s) const {
  HTP_EXPECTS(dev_ != nullptr, logic_error, "record on an empty htp::event");
  dev_->record(ref_, s);
}

bool event::query() const {
  HTP_EXPECTS(dev_ != nullptr, logic_error, "query on an empty htp::event");
  return dev_->query(ref_);
}

void event::synchronize() const {
  HTP_EXPECTS(dev_ != nullptr, logic_error, "synchronize on an empty htp::event");
  dev_->synchronize(ref_);
}

// ---- selection -------------------------------------------------------------------------------

int cuda_device_count(std::string* why) noexcept { return detail::cuda_device_count(why); }

std::unique_ptr<device> make_device(backend which, int ordinal) {
  switch (which) {
    case backend::sim:
      spdlog::info("htp: using the sim backend (asked for explicitly)");
      return make_sim_device();
    case backend::cuda: {
      std::string why;
      const int n = detail::cuda_device_count(&why);
      HTP_EXPECTS(n > 0, invalid_argument, "backend::cuda was requested but ", why,
                  "; use backend::sim or backend::automatic on a machine without a GPU");
      HTP_EXPECTS(ordinal >= 0 && ordinal < n, invalid_argument, "GPU ordinal ", ordinal,
                  " does not exist: ", n, " visible (0..", n - 1, ")");
      auto dev = detail::make_cuda_device(ordinal);
      spdlog::info("htp: using the cuda backend on GPU {} ({})", ordinal, dev->properties().name);
      return dev;
    }
    case backend::automatic: {
      std::string why;
      if (detail::cuda_device_count(&why) > 0) return make_device(backend::cuda, ordinal);
      spdlog::info("htp: using the sim backend because {}", why);
      return make_sim_device();
    }
  }
  throw invalid_argument("make_device: unknown backend value");
}

}  // namespace htp
