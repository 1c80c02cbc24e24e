// shared_tier's entries (publish, find, release), links and snapshot: everything a process does
// with an open tier, under its in-process mutex and the segment's robust mutex.
#include "shared_tier/tier_impl.hpp"

#include <htp/detail/check.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace htp {

using namespace shared_tier_detail;

namespace {

/// Holds the process's mutex and the segment's for a scope.
class segment_lock {
 public:
  explicit segment_lock(const shared_tier::impl& p) : p_(p), local_(p.local) {
    lock_segment(p_.map.get(), p_.config.timeout);
  }
  ~segment_lock() { unlock_segment(p_.map.get()); }
  segment_lock(const segment_lock&) = delete;
  segment_lock& operator=(const segment_lock&) = delete;

 private:
  const shared_tier::impl& p_;
  std::lock_guard<std::mutex> local_;
};

/// Publishes the rows a fill reserved (ready, held by `bit`) or takes them back (free). Each row
/// changes by single atomic stores, so when the segment's lock cannot be had in time the stores go
/// ahead without it: rows left "filling" by a live process would block its waiters for good.
void finish_fill(const shared_tier::impl& p, const std::vector<std::uint64_t>& rows, bool filled,
                 std::uint64_t bit) noexcept {
  std::optional<segment_lock> g;
  try {
    g.emplace(p);
  } catch (...) {  // a lock held past the timeout, or a system error: the stores need no lock
  }
  segment_header* h = p.map.get();
  for (std::uint64_t i : rows) {
    tier_entry& e = entries_of(h)[i];
    if (filled) {
      e.holders.store(bit, std::memory_order_relaxed);
      e.state.store(entry_ready, std::memory_order_release);
    } else if (e.state.load(std::memory_order_relaxed) == entry_filling && e.filler == p.slot) {
      e.state.store(entry_free, std::memory_order_release);
    }
  }
}

void check_entry_name(const std::string& tier, const std::string& name) {
  HTP_EXPECTS(!name.empty() && name.size() <= max_name_bytes, htp::invalid_argument,
              "shared tier '", tier, "': entry name '", name, "' must be 1 to ", max_name_bytes,
              " bytes (it is ", name.size(), ")");
}

/// The index of the non-free entry `name`, or -1. Caller holds the mutex.
std::int64_t lookup(const segment_header* h, const std::string& name) {
  const tier_entry* e = entries_of(h);
  for (std::uint64_t i = 0; i < h->max_entries; ++i) {
    if (e[i].state.load(std::memory_order_relaxed) == entry_free) continue;
    if (e[i].name[0] == name[0] && name.compare(e[i].name) == 0) {
      return static_cast<std::int64_t>(i);
    }
  }
  return -1;
}

shared_entry entry_view(segment_header* h, std::uint64_t i) {
  tier_entry& e = entries_of(h)[i];
  return shared_entry{e.name, data_of(h) + e.offset, static_cast<std::size_t>(e.bytes)};
}

void check_batch(const std::string& tier, const std::vector<shared_entry_request>& batch) {
  HTP_EXPECTS(!batch.empty(), htp::invalid_argument, "shared tier '", tier,
              "': publish of an empty batch");
  std::unordered_set<std::string> seen;
  for (const shared_entry_request& r : batch) {
    check_entry_name(tier, r.name);
    HTP_EXPECTS(r.bytes > 0, htp::invalid_argument, "shared tier '", tier, "': entry '", r.name,
                "' has 0 bytes");
    HTP_EXPECTS(seen.insert(r.name).second, htp::invalid_argument, "shared tier '", tier,
                "': entry '", r.name, "' is named twice in one batch");
  }
}

/// Reserves rows and extents for the whole batch (state filling, filled by `slot`), or throws
/// out_of_memory having reserved nothing. Caller holds the mutex.
std::vector<std::uint64_t> reserve(segment_header* h, const std::string& tier, std::size_t slot,
                                   const std::vector<shared_entry_request>& batch) {
  std::vector<std::uint64_t> extents;
  std::uint64_t total = 0;
  for (const shared_entry_request& r : batch) {
    extents.push_back((r.bytes + h->page_bytes - 1) / h->page_bytes * h->page_bytes);
    total += extents.back();
  }
  std::vector<std::uint64_t> rows;
  tier_entry* e = entries_of(h);
  for (std::uint64_t i = 0; i < h->max_entries && rows.size() < batch.size(); ++i) {
    if (e[i].state.load(std::memory_order_relaxed) == entry_free) rows.push_back(i);
  }
  if (rows.size() < batch.size()) {
    throw out_of_memory(
        detail::concat("shared tier '", tier, "': a batch of ", batch.size(),
                       " entries does not fit: ", h->max_entries - rows.size(), " of its ",
                       h->max_entries, " entry slots are in use (raise max_entries)"),
        total);
  }
  std::uint64_t used = 0, free_bytes = 0, largest = 0;
  const std::vector<std::uint64_t> offsets = first_fit(h, extents, used, free_bytes, largest);
  if (offsets.empty()) {
    throw out_of_memory(
        detail::concat("shared tier '", tier, "': a batch of ", batch.size(), " entries, ", total,
                       " bytes in pages of ", format_bytes(h->page_bytes), " (first '",
                       batch.front().name, "'), does not fit: used ", used, " of ", h->data_bytes,
                       " bytes, free ", free_bytes, ", largest free extent ", largest,
                       " (raise shared_tier_config::bytes or release entries)"),
        total);
  }
  for (std::size_t k = 0; k < batch.size(); ++k) {
    tier_entry& t = e[rows[k]];
    std::snprintf(t.name, sizeof t.name, "%s", batch[k].name.c_str());
    t.offset = offsets[k];
    t.bytes = batch[k].bytes;
    t.extent = extents[k];
    t.filler = static_cast<std::uint32_t>(slot);
    t.holders.store(0, std::memory_order_relaxed);
    t.state.store(entry_filling, std::memory_order_release);
  }
  return rows;
}

/// What one look at the batch found, under the mutex.
enum class batch_state { absent, ready, filling };

batch_state classify(segment_header* h, const std::string& tier,
                     const std::vector<shared_entry_request>& batch,
                     std::vector<std::uint64_t>& rows) {
  rows.clear();
  // One pass over the table, then a lookup per name: a batch of a model's thousands of tensors
  // costs one scan of the table, not one per tensor, while it holds the node's lock.
  std::unordered_map<std::string_view, std::uint64_t> by_name;
  const tier_entry* table = entries_of(h);
  for (std::uint64_t i = 0; i < h->max_entries; ++i) {
    if (table[i].state.load(std::memory_order_relaxed) != entry_free)
      by_name.emplace(std::string_view(table[i].name), i);
  }
  std::size_t present = 0;
  std::string missing, there;
  for (const shared_entry_request& r : batch) {
    const auto found = by_name.find(r.name);
    const std::int64_t i = found == by_name.end() ? -1 : static_cast<std::int64_t>(found->second);
    if (i < 0) {
      if (missing.empty()) missing = r.name;
      continue;
    }
    if (there.empty()) there = r.name;
    ++present;
    rows.push_back(static_cast<std::uint64_t>(i));
    const std::uint64_t bytes = entries_of(h)[i].bytes;
    HTP_EXPECTS(bytes == r.bytes, htp::invalid_argument, "shared tier '", tier, "': entry '",
                r.name, "' exists with ", bytes, " bytes, this batch asks for ", r.bytes,
                " (nothing was published)");
  }
  if (present == 0) return batch_state::absent;
  HTP_EXPECTS(present == batch.size(), htp::invalid_argument, "shared tier '", tier,
              "': the batch only partly exists: entry '", missing, "' does not while '", there,
              "' does (publish whole batches; nothing was published)");
  for (std::uint64_t i : rows) {
    if (entries_of(h)[i].state.load(std::memory_order_acquire) != entry_ready) {
      return batch_state::filling;
    }
  }
  return batch_state::ready;
}

}  // namespace

std::vector<shared_entry> shared_tier::publish(
    const std::vector<shared_entry_request>& batch,
    const std::function<void(std::vector<shared_entry>&)>& fill) {
  impl& p = *impl_;
  segment_header* h = p.map.get();
  check_batch(p.config.name, batch);
  const std::uint64_t bit = std::uint64_t{1} << p.slot;
  const auto deadline = std::chrono::steady_clock::now() + p.config.timeout;
  auto pause = std::chrono::microseconds(50);
  std::vector<std::uint64_t> rows;
  for (;;) {
    {
      segment_lock g(p);
      const batch_state s = classify(h, p.config.name, batch, rows);
      if (s == batch_state::ready) {
        std::vector<shared_entry> out;
        for (std::uint64_t i : rows) {
          entries_of(h)[i].holders.fetch_or(bit, std::memory_order_relaxed);
          out.push_back(entry_view(h, i));
        }
        return out;
      }
      if (s == batch_state::absent) {
        try {
          rows = reserve(h, p.config.name, p.slot, batch);
        } catch (const out_of_memory&) {
          if (reclaim_dead(h) == 0) throw;                  // never: this process is live
          rows = reserve(h, p.config.name, p.slot, batch);  // dead ranks' entries freed
        }
        break;
      }
      reclaim_dead(h);  // a dead filler's entries are freed: the next look may fill them
    }
    HTP_EXPECTS(std::chrono::steady_clock::now() < deadline, htp::logic_error, "shared tier '",
                p.config.name, "': entry '", batch.front().name,
                "' was still being filled by another process after ", p.config.timeout.count(),
                " ms (raise shared_tier_config::timeout)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  std::vector<shared_entry> out;
  for (std::uint64_t i : rows) out.push_back(entry_view(h, i));
  try {
    if (fill) fill(out);
  } catch (...) {
    finish_fill(p, rows, false, bit);
    throw;
  }
  finish_fill(p, rows, true, bit);
  return out;
}

shared_entry shared_tier::find(const std::string& name) {
  impl& p = *impl_;
  check_entry_name(p.config.name, name);
  segment_lock g(p);
  segment_header* h = p.map.get();
  const std::int64_t i = lookup(h, name);
  if (i < 0 || entries_of(h)[i].state.load(std::memory_order_acquire) != entry_ready) return {};
  entries_of(h)[i].holders.fetch_or(std::uint64_t{1} << p.slot, std::memory_order_relaxed);
  return entry_view(h, static_cast<std::uint64_t>(i));
}

void shared_tier::release(const std::string& name) {
  impl& p = *impl_;
  check_entry_name(p.config.name, name);
  segment_lock g(p);
  segment_header* h = p.map.get();
  const std::uint64_t bit = std::uint64_t{1} << p.slot;
  const std::int64_t i = lookup(h, name);
  const bool held = i >= 0 &&
                    entries_of(h)[i].state.load(std::memory_order_relaxed) == entry_ready &&
                    (entries_of(h)[i].holders.load(std::memory_order_relaxed) & bit) != 0;
  HTP_EXPECTS(held, htp::invalid_argument, "shared tier '", p.config.name, "': release of entry '",
              name, "', which this process does not hold");
  tier_entry& e = entries_of(h)[i];
  if ((e.holders.fetch_and(~bit, std::memory_order_relaxed) & ~bit) == 0) {
    e.state.store(entry_free, std::memory_order_release);
  }
}

std::shared_ptr<shared_link> shared_tier::link(const std::string& name,
                                               std::uint64_t bytes_per_second,
                                               std::uint64_t burst_bytes) {
  impl& p = *impl_;
  segment_lock g(p);
  for (detail::link_cell& cell : p.map->links) {
    if (detail::link_cell_claim(cell, name, bytes_per_second, burst_bytes)) {
      return detail::make_cell_link(cell, p.slot, std::shared_ptr<const void>(p.map));
    }
  }
  throw out_of_memory(
      detail::concat("shared tier '", p.config.name, "': link '", name, "' cannot be made: all ",
                     link_cells, " link cells are in use"),
      0);
}

void* shared_tier::data() const noexcept { return data_of(impl_->map.get()); }
std::size_t shared_tier::data_bytes() const noexcept { return impl_->plan.data_bytes; }
std::size_t shared_tier::slot() const noexcept { return impl_->slot; }
bool shared_tier::created() const noexcept { return impl_->made; }
const shared_tier_config& shared_tier::config() const noexcept { return impl_->config; }

shared_tier_listing shared_tier::describe() const {
  const impl& p = *impl_;
  shared_tier_listing out;
  out.name = p.config.name;
  out.path = p.path;
  out.segment_bytes = p.plan.segment_bytes;
  segment_lock g(p);
  reclaim_dead(p.map.get());
  count_into(p.map.get(), out);
  return out;
}

}  // namespace htp
