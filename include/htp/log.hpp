// htp's logging: one named logger, "htp", writing to stderr (never stdout, which belongs to the
// program). Its level comes from the HTP_LOG_LEVEL environment variable (trace, debug, info, warn,
// error, critical, off; default info) when htp first logs, and from set_log_level at any time. A
// program with its own logging routes htp's messages there with set_log_sink. spdlog is an
// implementation detail: nothing here exposes it, so a program with its own spdlog or fmt links
// without clashes.
#pragma once

#include <functional>
#include <string_view>

namespace htp {

/// Severity of a log message, lowest first; `off` as a level silences htp.
enum class log_level { trace, debug, info, warn, error, critical, off };

/// Returns "trace", "debug", "info", "warn", "error", "critical" or "off".
const char* to_string(log_level level) noexcept;

/// Parses a level name as to_string writes it (also "warning"; case-sensitive).
/// @throws htp::invalid_argument naming the text and the accepted names.
log_level parse_log_level(std::string_view text);

/// Messages below `level` are dropped. Thread-safe; takes effect for messages logged after it.
void set_log_level(log_level level) noexcept;

/// The level now (HTP_LOG_LEVEL, or info, until set_log_level). Thread-safe.
log_level get_log_level() noexcept;

/// Receives each message htp logs at or above the level: its severity and its text (no time
/// stamp, no trailing newline). Called on the thread that logs, under htp's logging lock (calls
/// are serialised); it must not call back into htp's logging and should not throw (a throw is
/// swallowed).
using log_sink = std::function<void(log_level level, std::string_view message)>;

/// Sends htp's messages to `sink` instead of stderr; an empty sink restores stderr. Thread-safe.
/// Never throws.
void set_log_sink(log_sink sink);

}  // namespace htp
