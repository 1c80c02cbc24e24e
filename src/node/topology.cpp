// sysfs reads behind include/htp/detail/topology.hpp.
#include <htp/detail/topology.hpp>

#include <cctype>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>

namespace htp::detail {

std::string normalize_pci_bus_id(std::string id) {
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto colon = id.find(':');
  if (colon != std::string::npos && colon > 4) id.erase(0, colon - 4);  // 8-digit domains (NVML style)
  return id;
}

int numa_node_of_pci(const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) return -1;
  std::ifstream f("/sys/bus/pci/devices/" + pci_bus_id + "/numa_node");
  int node = -1;
  if (!(f >> node)) return -1;
  return node < 0 ? -1 : node;
}

std::string pcie_root_port_of(const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) return {};
  char resolved[PATH_MAX];
  const std::string link = "/sys/bus/pci/devices/" + pci_bus_id;
  if (realpath(link.c_str(), resolved) == nullptr) return {};
  // e.g. /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0
  const std::string path(resolved);
  const std::string prefix = "/sys/devices/";
  if (path.compare(0, prefix.size(), prefix) != 0) return {};
  const auto first = path.find('/', prefix.size());           // end of "pci0000:00"
  if (first == std::string::npos) return {};
  const auto second = path.find('/', first + 1);             // end of the root port
  if (second == std::string::npos) return {};
  return path.substr(prefix.size(), second - prefix.size());
}

}  // namespace htp::detail
