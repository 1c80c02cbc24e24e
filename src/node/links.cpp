// The node's shared links as a tree of nested GPU groups. See src/node/links.hpp.
#include "node/links.hpp"

#include <htp/detail/check.hpp>
#include <htp/detail/topology.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace htp::detail {

namespace {

bool subset(const std::vector<std::size_t>& a, const std::vector<std::size_t>& b) {
  return std::all_of(a.begin(), a.end(),
                     [&](std::size_t g) { return std::find(b.begin(), b.end(), g) != b.end(); });
}

bool intersect(const std::vector<std::size_t>& a, const std::vector<std::size_t>& b) {
  return std::any_of(a.begin(), a.end(),
                     [&](std::size_t g) { return std::find(b.begin(), b.end(), g) != b.end(); });
}

bool directional(const node_link_group& g) {
  return g.h2d_bytes_per_second > 0 || g.d2h_bytes_per_second > 0;
}

}  // namespace

std::shared_ptr<shared_link> node_links::above(int k, copy_direction d) const {
  const node_link_entry& e = entries[static_cast<std::size_t>(k)];
  if (e.combined) return e.combined;
  for (int j = e.parent; j >= 0; j = entries[static_cast<std::size_t>(j)].parent) {
    const node_link_entry& up = entries[static_cast<std::size_t>(j)];
    const auto& own = d == copy_direction::host_to_device ? up.h2d : up.d2h;
    if (own) return own;
    if (up.combined) return up.combined;
  }
  return nullptr;
}

std::shared_ptr<shared_link> node_links::upstream(std::size_t gpu, copy_direction d) const {
  const int k = innermost[gpu];
  if (k < 0) return nullptr;
  const node_link_entry& e = entries[static_cast<std::size_t>(k)];
  const auto& own = d == copy_direction::host_to_device ? e.h2d : e.d2h;
  return own ? own : above(k, d);
}

std::string build_node_links(const std::vector<node_link_group>& groups, std::size_t gpus,
                             std::uint64_t burst, node_links& out) {
  out = {};
  std::set<std::string> names;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const node_link_group& grp = groups[k];
    const std::string at = "shared_links[" + std::to_string(k) + "] ('" + grp.name + "')";
    if (!names.insert(grp.name).second) return at + " repeats a name; give each group its own";
    if (grp.gpus.empty()) return at + " has no GPUs";
    std::vector<std::size_t> sorted = grp.gpus;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return at + " names a GPU twice";
    for (std::size_t g : grp.gpus) {
      if (g >= gpus)
        return at + " names GPU " + std::to_string(g) + " but the node has " + std::to_string(gpus);
    }
    for (std::size_t j = 0; j < k; ++j) {
      const auto& other = groups[j].gpus;
      if (intersect(grp.gpus, other) && !subset(grp.gpus, other) && !subset(other, grp.gpus)) {
        return at + " and shared_links[" + std::to_string(j) + "] ('" + groups[j].name +
               "') share GPUs without one holding the other; groups must nest (a switch inside a "
               "NUMA "
               "node) or be disjoint";
      }
    }
  }
  // Inner groups first: by size, then (for equal GPU sets) in the order given.
  std::vector<std::size_t> order(groups.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return groups[a].gpus.size() < groups[b].gpus.size();
  });
  out.entries.resize(groups.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    node_link_entry& e = out.entries[order[i]];
    e.group = groups[order[i]];
    for (std::size_t j = i + 1; j < order.size(); ++j) {
      if (subset(e.group.gpus, groups[order[j]].gpus)) {
        e.parent = static_cast<int>(order[j]);
        break;
      }
    }
  }
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (groups[k].combined_bytes_per_second == 0) continue;
    for (int j = out.entries[k].parent; j >= 0;
         j = out.entries[static_cast<std::size_t>(j)].parent) {
      if (directional(groups[static_cast<std::size_t>(j)])) {
        return "shared_links[" + std::to_string(k) + "] ('" + groups[k].name +
               "') has a combined cap inside '" + groups[static_cast<std::size_t>(j)].name +
               "', which caps one direction; a cap both directions share (memory bandwidth) sits "
               "above the "
               "directional ones (PCIe), never below";
      }
    }
  }
  // Outer groups first, so every link's parent exists when it is made.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int k = static_cast<int>(*it);
    node_link_entry& e = out.entries[*it];
    const node_link_group& grp = e.group;
    if (grp.combined_bytes_per_second > 0) {
      std::shared_ptr<shared_link> up;
      for (int j = e.parent; j >= 0 && !up; j = out.entries[static_cast<std::size_t>(j)].parent) {
        up = out.entries[static_cast<std::size_t>(j)].combined;
      }
      e.combined = std::make_shared<shared_link>(grp.name, grp.combined_bytes_per_second, burst,
                                                 &token_bucket::steady_clock_ns, std::move(up));
    }
    if (grp.h2d_bytes_per_second > 0) {
      e.h2d = std::make_shared<shared_link>(grp.name + " h2d", grp.h2d_bytes_per_second, burst,
                                            &token_bucket::steady_clock_ns,
                                            out.above(k, copy_direction::host_to_device));
    }
    if (grp.d2h_bytes_per_second > 0) {
      e.d2h = std::make_shared<shared_link>(grp.name + " d2h", grp.d2h_bytes_per_second, burst,
                                            &token_bucket::steady_clock_ns,
                                            out.above(k, copy_direction::device_to_host));
    }
  }
  out.innermost.assign(gpus, -1);
  for (std::size_t g = 0; g < gpus; ++g) {
    for (std::size_t k : order) {
      if (std::find(groups[k].gpus.begin(), groups[k].gpus.end(), g) != groups[k].gpus.end()) {
        out.innermost[g] = static_cast<int>(k);
        break;
      }
    }
  }
  return {};
}

std::vector<node_link_group> discover_pcie_groups(const std::vector<device*>& gpus) {
  std::map<std::string, std::vector<std::size_t>> by_port;
  for (std::size_t g = 0; g < gpus.size(); ++g) {
    const std::string port = pcie_root_port_of(gpus[g]->properties().pci_bus_id);
    if (!port.empty()) by_port[port].push_back(g);
  }
  std::vector<node_link_group> out;
  for (auto& [port, members] : by_port) {
    if (members.size() < 2) continue;
    node_link_group grp;
    grp.name = "pcie:" + port;
    grp.gpus = members;
    out.push_back(std::move(grp));
  }
  return out;
}

std::vector<node_link_group> discover_numa_groups(const std::vector<device*>& gpus,
                                                  std::uint64_t numa_bytes_per_second) {
  std::map<int, std::vector<std::size_t>> by_node;
  for (std::size_t g = 0; g < gpus.size(); ++g) {
    const int nn = gpus[g]->properties().numa_node;
    if (nn >= 0) by_node[nn].push_back(g);
  }
  std::vector<node_link_group> out;
  for (auto& [nn, members] : by_node) {
    node_link_group grp;
    grp.name = "numa" + std::to_string(nn);
    grp.gpus = members;
    grp.combined_bytes_per_second = numa_bytes_per_second;
    out.push_back(std::move(grp));
  }
  return out;
}

}  // namespace htp::detail
