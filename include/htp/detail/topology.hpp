// Host topology from sysfs, for the node's shared-link discovery (src/node/topology.cpp). Plain
// file reads, no CUDA. Every function returns "unknown" (-1 or empty) where sysfs has no answer.
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

}  // namespace htp::detail
