// The memory a pager pages between and the link that joins them: the HBM and pinned host slab
// allocators and the transfer engine over both, made from one pager_config. The pager's other
// components borrow them. Construction validates the budgets against the device and the host
// (htp::out_of_memory naming the field) and pins the host tier.
#pragma once

#include <htp/device.hpp>
#include <htp/pager.hpp>
#include <htp/slab_allocator.hpp>
#include <htp/transfer_engine.hpp>

#include <cstddef>
#include <memory>

namespace htp::detail {

/// What a host budget can never exceed: the 47-bit user address space of x86-64 and arm64 Linux
/// (128 TiB), in which every pinned slab must be mapped. Physical memory is no bound: a microVM's
/// MemTotal can read far below the RAM it can use (it grows as the guest touches memory), so a
/// budget above it is allowed and a slab the host cannot pin fails then, as out_of_memory.
inline constexpr std::size_t host_address_space_bytes = std::size_t{1} << 47;

struct tiers {
  /// @throws htp::invalid_argument for a config the pager refuses (pager.hpp, pager_config);
  ///         htp::out_of_memory for a budget larger than the memory behind it.
  tiers(device& dev, const pager_config& c);
  ~tiers();
  tiers(const tiers&) = delete;
  tiers& operator=(const tiers&) = delete;

  std::unique_ptr<slab_allocator> hbm;
  std::unique_ptr<slab_allocator> host;  // null when host_budget_bytes is 0
  std::unique_ptr<transfer_engine> engine;
};

}  // namespace htp::detail
