// The node's shared upstream links as a tree (src/node/links.cpp): groups of GPUs that nest (a
// PCIe switch inside a NUMA node), each with up to three shared_links (H2D, D2H, and one cap for
// both directions together: a NUMA node's memory bandwidth). See docs/multi_gpu.md, "Budgets".
#pragma once

#include <htp/node.hpp>
#include <htp/shared_link.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace htp::detail {

struct node_link_entry {
  node_link_group group;
  int parent = -1;                   // the smallest group strictly around this one; -1 = top
  bool follows_calibration = false;  // discovered PCIe group: H2D/D2H caps set from GPU calibration
  std::shared_ptr<shared_link> h2d, d2h, combined;
};

struct node_links {
  std::vector<node_link_entry> entries;  // in the order given (configured) or found (discovered)
  std::vector<int> innermost;            // per GPU: the smallest group holding it; -1 = none

  /// The link a GPU's lane for `d` (host_to_device or device_to_host) draws from first; null =
  /// none.
  std::shared_ptr<shared_link> upstream(std::size_t gpu, copy_direction d) const;
  /// The link above entry k's link for `d` inside the tree: k's combined link, else the nearest
  /// enclosing group's link for d (or its combined one). Null at the top.
  std::shared_ptr<shared_link> above(int k, copy_direction d) const;
};

/// Checks `groups` over `gpus` GPUs (known GPU indices, unique names, groups disjoint or nested,
/// a combined cap never under a directional one) and builds their links with `burst` bytes each.
/// Returns an empty string and fills `out`, or returns what is wrong (the caller throws it for a
/// configuration, or drops what it discovered).
std::string build_node_links(const std::vector<node_link_group>& groups, std::size_t gpus,
                             std::uint64_t burst, node_links& out);

/// Groups found from the topology: GPUs under one PCIe root port (two or more; caps follow the
/// first GPU's calibration, marked follows_calibration by the caller) and GPUs on one NUMA node
/// (combined cap `numa_bytes_per_second`, 0 = listed but not capped).
std::vector<node_link_group> discover_pcie_groups(const std::vector<device*>& gpus);
std::vector<node_link_group> discover_numa_groups(const std::vector<device*>& gpus,
                                                  std::uint64_t numa_bytes_per_second);

}  // namespace htp::detail
