#include "log.hpp"

#include <htp/detail/check.hpp>
#include <htp/log.hpp>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace htp {
namespace {

spdlog::level::level_enum to_spdlog(log_level l) {
  return static_cast<spdlog::level::level_enum>(static_cast<int>(l));  // same order, same values
}

log_level from_spdlog(spdlog::level::level_enum l) {
  return static_cast<log_level>(static_cast<int>(l));
}

/// The one sink of the logger: stderr with a time stamp, or the caller's log_sink.
class switchable_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void set(log_sink next) {
    std::lock_guard lock(mutex_);
    sink_ = std::move(next);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (sink_) {
      try {
        sink_(from_spdlog(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
      } catch (...) {
        // A sink's throw must not escape into the code that logged.
      }
      return;
    }
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  log_sink sink_;
};

struct htp_logger {
  std::shared_ptr<switchable_sink> sink = std::make_shared<switchable_sink>();
  spdlog::logger logger{"htp", sink};

  htp_logger() {
    logger.set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
    logger.set_level(spdlog::level::info);
    logger.flush_on(spdlog::level::warn);
    if (const char* env = std::getenv("HTP_LOG_LEVEL"); env != nullptr && *env != '\0') {
      try {
        logger.set_level(to_spdlog(parse_log_level(env)));
      } catch (const invalid_argument& e) {
        logger.warn("ignoring HTP_LOG_LEVEL: {}", e.what());
      }
    }
  }
};

htp_logger& instance() {
  static htp_logger l;
  return l;
}

}  // namespace

namespace detail {
spdlog::logger& logger() { return instance().logger; }
}  // namespace detail

const char* to_string(log_level level) noexcept {
  switch (level) {
    case log_level::trace: return "trace";
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warn: return "warn";
    case log_level::error: return "error";
    case log_level::critical: return "critical";
    case log_level::off: return "off";
  }
  return "?";
}

log_level parse_log_level(std::string_view text) {
  for (int i = 0; i <= static_cast<int>(log_level::off); ++i) {
    const auto l = static_cast<log_level>(i);
    if (text == to_string(l)) return l;
  }
  if (text == "warning") return log_level::warn;
  throw invalid_argument(detail::concat("unknown log level '", text,
                                        "': use trace, debug, info, warn, error, critical or off"));
}

void set_log_level(log_level level) noexcept { instance().logger.set_level(to_spdlog(level)); }

log_level get_log_level() noexcept { return from_spdlog(instance().logger.level()); }

void set_log_sink(log_sink sink) { instance().sink->set(std::move(sink)); }

}  // namespace htp
