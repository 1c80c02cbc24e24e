#include "process_liveness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace htp::detail {

namespace {
/// /proc/<pid>/stat's state (field 3) and start time (field 22); false if it cannot be read.
bool read_stat(std::int64_t pid, char& state, std::uint64_t& start) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // Field 2 (the command) may hold spaces and parentheses: the fields after it start after the
  // last ')'. Field 3 is the state, field 22 the start time.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || std::sscanf(p + 1, " %c", &state) != 1) return false;
  ++p;
  for (int field = 2; *p != '\0' && field < 22; ++p) {
    if (*p == ' ') ++field;
  }
  unsigned long long s = 0;
  if (std::sscanf(p, "%llu", &s) != 1) return false;
  start = s;
  return true;
}
}  // namespace

std::uint64_t process_start_time(std::int64_t pid) noexcept {
  char state = 0;
  std::uint64_t start = 0;
  return read_stat(pid, state, start) ? start : 0;
}

bool process_alive(std::int64_t pid, std::uint64_t start_time) noexcept {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  char state = 0;
  std::uint64_t start = 0;
  if (!read_stat(pid, state, start)) return true;  // kill() says it lives; /proc cannot say more
  if (state == 'Z' || state == 'X' || state == 'x') return false;  // never comes back
  return start_time == 0 || start == start_time;
}

}  // namespace htp::detail
