// sysfs reads behind include/htp/detail/topology.hpp.
#include <htp/detail/topology.hpp>

#include <cctype>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>

#include <sys/syscall.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

namespace htp::detail {

std::string normalize_pci_bus_id(std::string id) {
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto colon = id.find(':');
  if (colon != std::string::npos && colon > 4)
    id.erase(0, colon - 4);  // 8-digit domains (NVML style)
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
  const auto first = path.find('/', prefix.size());  // end of "pci0000:00"
  if (first == std::string::npos) return {};
  const auto second = path.find('/', first + 1);  // end of the root port
  if (second == std::string::npos) return {};
  return path.substr(prefix.size(), second - prefix.size());
}

namespace {
constexpr int mpol_preferred = 1;  // <linux/mempolicy.h>, without needing libnuma's headers
constexpr unsigned long mpol_f_node = 1, mpol_f_addr = 2;
constexpr unsigned long mask_bits = 16 * 8 * sizeof(unsigned long);
}  // namespace

numa_preference::numa_preference(int node) {
#if defined(SYS_set_mempolicy) && defined(SYS_get_mempolicy)
  if (node < 0 || static_cast<unsigned long>(node) >= mask_bits) {
    why_ = "NUMA node " + std::to_string(node) + " is unknown";
    return;
  }
  if (syscall(SYS_get_mempolicy, &old_mode_, old_mask_, mask_bits, nullptr, 0UL) != 0) {
    why_ = std::string("get_mempolicy: ") + std::strerror(errno);
    return;
  }
  unsigned long mask[16] = {};
  mask[node / (8 * sizeof(unsigned long))] = 1UL << (node % (8 * sizeof(unsigned long)));
  if (syscall(SYS_set_mempolicy, mpol_preferred, mask, mask_bits) != 0) {
    why_ =
        "set_mempolicy(MPOL_PREFERRED, node " + std::to_string(node) + "): " + std::strerror(errno);
    return;
  }
  applied_ = true;
#else
  why_ = "this platform has no set_mempolicy";
  (void)node;
#endif
}

numa_preference::~numa_preference() {
#if defined(SYS_set_mempolicy)
  if (applied_) syscall(SYS_set_mempolicy, old_mode_, old_mask_, mask_bits);
#endif
}

int numa_node_of_address(const void* p) noexcept {
#if defined(SYS_get_mempolicy)
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0UL, p, mpol_f_node | mpol_f_addr) != 0) return -1;
  return node;
#else
  (void)p;
  return -1;
#endif
}

}  // namespace htp::detail
