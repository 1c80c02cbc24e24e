// What tests/shared_tier_test.cpp and its child process (shared_tier_child.cpp) agree on: the
// tier's config, the batches they publish and how entries are filled and checked.
#pragma once

#include <htp/checksum.hpp>
#include <htp/shared_tier.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace htp::tier_test {

inline htp::shared_tier_config test_config(const std::string& shm_dir, const std::string& name) {
  htp::shared_tier_config c;
  c.name = name;
  c.shm_dir = shm_dir;
  c.bytes = std::size_t{4} << 20;
  c.page_bytes = std::size_t{4} << 10;
  c.max_entries = 256;
  c.timeout = std::chrono::milliseconds(30000);
  return c;
}

/// An entry's seed: a hash of its name, so every process fills and checks it the same way.
inline std::uint64_t seed_of(const std::string& name) { return std::hash<std::string>{}(name) | 1; }

inline void fill_entries(std::vector<htp::shared_entry>& entries) {
  for (htp::shared_entry& e : entries) htp::fill_pattern(e.data, e.bytes, seed_of(e.name));
}

/// Whether every entry holds its pattern.
inline bool entries_intact(const std::vector<htp::shared_entry>& entries) {
  for (const htp::shared_entry& e : entries) {
    std::vector<unsigned char> want(e.bytes);
    htp::fill_pattern(want.data(), e.bytes, seed_of(e.name));
    if (htp::checksum(e.data, e.bytes) != htp::checksum(want.data(), e.bytes)) return false;
  }
  return true;
}

inline std::uint64_t batch_checksum(const std::vector<htp::shared_entry>& entries) {
  std::uint64_t sum = 0;
  for (const htp::shared_entry& e : entries) sum = sum * 31 + htp::checksum(e.data, e.bytes);
  return sum;
}

inline std::vector<htp::shared_entry_request> race_batch() {
  std::vector<htp::shared_entry_request> b;
  for (int i = 0; i < 8; ++i) {
    b.push_back({"race." + std::to_string(i), static_cast<std::size_t>(5000 * (i + 1))});
  }
  return b;
}

/// Entry k of the loop (six names, each with its own size).
inline htp::shared_entry_request loop_request(int k) {
  const int i = k % 6;
  return {"loop." + std::to_string(i), static_cast<std::size_t>(10000 * (i + 1) + 17)};
}

/// Writes `text` to `path` whole: to a temporary file, then renamed, so a reader never sees half.
inline void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace htp::tier_test
