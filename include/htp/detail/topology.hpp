// Host topology from sysfs, for the node's shared-link discovery, and NUMA placement of its host
// tiers (src/node/topology.cpp). Plain file reads and memory-policy system calls, no CUDA. Every
// function returns "unknown" (-1 or empty) where sysfs has no answer.
#pragma once

#include <string>

namespace htp::detail {

/// The PCI address in sysfs form: lower case, with a 4-digit domain ("0000:3b:00.0").
std::string normalize_pci_bus_id(std::string id);
/// /sys/bus/pci/devices/<id>/numa_node, or -1 (no such file, no NUMA, or "-1" in it).
int numa_node_of_pci(const std::string& pci_bus_id);
/// The PCIe root port above the device ("pci0000:00/0000:00:01.0" from the device's sysfs path),
/// which every device below it shares as its upstream link; empty when unknown.
std::string pcie_root_port_of(const std::string& pci_bus_id);

/// While alive, the calling thread's memory policy prefers NUMA node `node` (set_mempolicy with
/// MPOL_PREFERRED): pages it or threads it starts meanwhile first touch (pinning included: the
/// driver's pinned allocations follow the thread's policy, as under numactl) come from that node
/// when it has room. The previous policy comes back on destruction. A clean fallback: where the
/// kernel has no NUMA support or the node does not exist, nothing changes and why() says so.
class numa_preference {
 public:
  explicit numa_preference(int node);
  ~numa_preference();
  numa_preference(const numa_preference&) = delete;
  numa_preference& operator=(const numa_preference&) = delete;
  bool applied() const noexcept { return applied_; }
  const std::string& why() const noexcept { return why_; }  ///< empty when applied

 private:
  bool applied_ = false;
  int old_mode_ = 0;
  unsigned long old_mask_[16] = {};
  std::string why_;
};

/// The NUMA node holding the page at `p` (get_mempolicy MPOL_F_NODE | MPOL_F_ADDR), or -1.
int numa_node_of_address(const void* p) noexcept;

}  // namespace htp::detail
