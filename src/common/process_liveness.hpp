// Whether another process of this machine still runs, as the node's shared tier and the sim's
// cross-process collectives ask it of the ranks they recorded: a pid plus the process's start time
// (field 22 of /proc/<pid>/stat), so a pid the kernel gave to a new process is not taken for the
// recorded one. Included by name ("process_liveness.hpp") from any module.
#pragma once

#include <cstdint>

namespace htp::detail {

/// The start time of process `pid` (field 22 of /proc/<pid>/stat), or 0 if /proc cannot say (the
/// process is gone, or /proc is unreadable). Never throws.
std::uint64_t process_start_time(std::int64_t pid) noexcept;

/// Whether process `pid`, started at `start_time`, still runs: false if it is gone, a zombie, or
/// the pid now names a process started at another time. When kill() says the pid lives but its
/// /proc entry cannot be read (hidepid, no /proc), or `start_time` is 0 (it could not be read when
/// recorded), it counts as alive: a live rank is never reclaimed on a guess. Never throws.
bool process_alive(std::int64_t pid, std::uint64_t start_time) noexcept;

}  // namespace htp::detail
