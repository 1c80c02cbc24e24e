// What the host says about its memory, for the message of a failed pinned allocation or host
// registration: page-locking is limited by the host's free RAM and the locked-memory limit, not by
// the GPU. Plain C++ (Linux /proc and getrlimit); included only by cuda_device.cpp.
#pragma once

#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace htp::cuda {

/// Bytes of a "Name:   N kB" line of /proc/meminfo, 0 when absent.
inline std::uint64_t meminfo_bytes(const std::string& name) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == name + ":") return kib * 1024;
  }
  return 0;
}

/// One sentence: the host's available and total RAM and the locked-memory limit (RLIMIT_MEMLOCK),
/// e.g. "host: 12.5 of 503.8 GiB available (MemAvailable), locked-memory limit unlimited".
inline std::string host_memory_facts() {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const std::uint64_t avail = meminfo_bytes("MemAvailable");
  const std::uint64_t total = meminfo_bytes("MemTotal");
  out << "host: ";
  if (total != 0) {
    out << static_cast<double>(avail) / gib << " of " << static_cast<double>(total) / gib
        << " GiB available (MemAvailable)";
  } else {
    out << "free RAM unknown (no /proc/meminfo)";
  }
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
    out << ", locked-memory limit (ulimit -l) ";
    if (lim.rlim_cur == RLIM_INFINITY) {
      out << "unlimited";
    } else if (static_cast<double>(lim.rlim_cur) < gib) {
      out << static_cast<double>(lim.rlim_cur) / (1024.0 * 1024.0) << " MiB";
    } else {
      out << static_cast<double>(lim.rlim_cur) / gib << " GiB";
    }
  }
  return out.str();
}

}  // namespace htp::cuda
