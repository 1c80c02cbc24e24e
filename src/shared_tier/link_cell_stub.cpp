// TEMPORARY stand-in for src/transfer/link_cell.cpp (being written on another branch): just enough
// of the link cell for shared_tier::link to build and claim cells. Delete at merge.
#include <htp/detail/check.hpp>
#include <htp/detail/link_cell.hpp>

#include <cstdio>
#include <cstring>

namespace htp::detail {

bool link_cell_claim(link_cell& cell, const std::string& name, std::uint64_t bytes_per_second,
                     std::uint64_t burst_bytes) {
  if (cell.state.load() == 0) {
    std::snprintf(cell.name, sizeof cell.name, "%s", name.c_str());
    cell.rate = bytes_per_second;
    cell.burst = burst_bytes;
    cell.state.store(2);
    return true;
  }
  return name.compare(cell.name) == 0;
}

void link_cell_forget_slot(link_cell& cell, std::size_t slot) noexcept {
  if (slot >= link_cell_slots) return;
  for (auto& w : cell.waiting[slot]) w.store(0);
}

std::shared_ptr<shared_link> make_cell_link(link_cell&, std::size_t, std::shared_ptr<const void>) {
  throw htp::logic_error("make_cell_link: not built yet (src/transfer/link_cell.cpp)");
}

}  // namespace htp::detail
