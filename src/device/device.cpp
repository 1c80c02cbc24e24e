#include <htp/detail/check.hpp>
#include <htp/detail/cuda_backend.hpp>
#include <htp/device.hpp>
#include <htp/sim_device.hpp>

#include "log.hpp"

#include <cstdlib>
#include <utility>

namespace htp {

const char* to_string(backend b) noexcept {
  switch (b) {
    case backend::automatic: return "automatic";
    case backend::cuda: return "cuda";
    case backend::sim: return "sim";
    case backend::cuda_or_sim: return "cuda_or_sim";
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

graph graph::end_capture(device& dev, stream_ref s) { return graph(dev, dev.end_capture(s)); }

graph::~graph() {
  if (dev_ != nullptr && ref_) dev_->destroy_graph(ref_);
}

graph::graph(graph&& other) noexcept
    : dev_(std::exchange(other.dev_, nullptr)), ref_(std::exchange(other.ref_, {})) {}

graph& graph::operator=(graph&& other) noexcept {
  if (this != &other) {
    if (dev_ != nullptr && ref_) dev_->destroy_graph(ref_);
    dev_ = std::exchange(other.dev_, nullptr);
    ref_ = std::exchange(other.ref_, {});
  }
  return *this;
}

void graph::launch(stream_ref s) const {
  HTP_EXPECTS(dev_ != nullptr && ref_, logic_error, "launch on an empty htp::graph");
  dev_->launch_graph(ref_, s);
}

// ---- selection -------------------------------------------------------------------------------

int cuda_device_count(std::string* why) noexcept { return detail::cuda_device_count(why); }

backend backend_from_environment() {
  const char* env = std::getenv("HTP_BACKEND");
  if (env == nullptr || *env == '\0') return backend::cuda;
  const std::string v(env);
  if (v == "cuda") return backend::cuda;
  if (v == "sim") return backend::sim;
  if (v == "auto") return backend::cuda_or_sim;
  throw invalid_argument(detail::concat("HTP_BACKEND='", v,
                                        "' is not a backend: use cuda, sim or auto (cuda when "
                                        "usable, else sim), or unset it (cuda)"));
}

namespace {

/// The cuda device, or htp::cuda_error saying why the cuda backend cannot run and what to do.
std::unique_ptr<device> make_cuda(int ordinal) {
  const detail::cuda_probe p = detail::probe_cuda();
  if (p.count == 0) {
    throw cuda_error(
        p.code, p.code_name, "htp::make_device(backend::cuda)", __FILE__, __LINE__,
        detail::concat("the cuda backend cannot run: ", p.why, ". ", p.remedy,
                       ". To run on the CPU emulation instead pass backend::sim, or "
                       "backend::cuda_or_sim to fall back when CUDA is unusable "
                       "(HTP_BACKEND=sim or HTP_BACKEND=auto for backend::automatic)"));
  }
  HTP_EXPECTS(ordinal >= 0 && ordinal < p.count, invalid_argument, "GPU ordinal ", ordinal,
              " does not exist: ", p.count, " visible (0..", p.count - 1, ")");
  auto dev = detail::make_cuda_device(ordinal);
  detail::logger().info("using the cuda backend on GPU {} ({})", ordinal, dev->properties().name);
  return dev;
}

}  // namespace

std::unique_ptr<device> make_device(backend which, int ordinal) {
  if (which == backend::automatic) which = backend_from_environment();
  switch (which) {
    case backend::sim:
      detail::logger().info("using the sim backend (asked for explicitly)");
      return make_sim_device();
    case backend::cuda: return make_cuda(ordinal);
    case backend::cuda_or_sim: {
      std::string why;
      if (detail::cuda_device_count(&why) > 0) return make_cuda(ordinal);
      detail::logger().warn("falling back to the sim backend (backend::cuda_or_sim) because {}",
                            why);
      return make_sim_device();
    }
    case backend::automatic: break;
  }
  throw invalid_argument("make_device: unknown backend value");
}

}  // namespace htp
