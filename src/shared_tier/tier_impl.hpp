// shared_tier::impl: one process's handle on a tier segment (internal to src/shared_tier).
#pragma once

#include "shared_tier/segment.hpp"

#include <htp/shared_tier.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

namespace htp {

struct shared_tier::impl {
  shared_tier_config config;
  shared_tier_detail::layout_plan plan;
  std::string path;
  int fd = -1;  ///< kept open: close() takes its flock again
  /// The whole segment; links made by link() share it, so it stays mapped while they live.
  std::shared_ptr<shared_tier_detail::segment_header> map;
  std::size_t slot = 0;
  bool made = false;
  /// Serialises this process's threads around the segment's robust mutex.
  mutable std::mutex local;

  ~impl();
  void open_locked();
  void attach_or_create(std::size_t size, std::uint64_t allocated);
  void create(std::uint64_t reusable);
  void abandon() noexcept;
};

}  // namespace htp
