// The shared tier's segment: layout, header checks, liveness, preflight, the robust mutex, the
// reclaim of dead ranks and the first-fit allocator over the entry table (segment.hpp).
#include "shared_tier/segment.hpp"

#include "process_liveness.hpp"

#include <htp/detail/check.hpp>
#include <htp/version.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#if defined(__SANITIZE_THREAD__)
#define HTP_TIER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HTP_TIER_TSAN 1
#endif
#endif
#ifndef HTP_TIER_TSAN
#define HTP_TIER_TSAN 0
#endif

namespace htp::shared_tier_detail {

namespace {

std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

std::uint32_t compute_layout_hash() noexcept {
  const std::uint64_t parts[] = {
      sizeof(segment_header),         sizeof(rank_slot),       sizeof(tier_entry),
      sizeof(detail::link_cell),      sizeof(pthread_mutex_t), offsetof(segment_header, ranks),
      offsetof(segment_header, links)};
  std::uint32_t h = 2166136261u;  // FNV-1a over the sizes
  for (std::uint64_t p : parts) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<std::uint32_t>((p >> (8 * i)) & 0xff);
      h *= 16777619u;
    }
  }
  return h;
}

layout_plan plan_layout(const shared_tier_config& c) {
  layout_plan p;
  p.data_bytes = round_up(c.bytes, c.page_bytes);
  p.entries_offset = round_up(sizeof(segment_header), 64);
  // The data area starts on a page_bytes boundary of the segment, at most 2 MiB (a larger
  // page size would only pad the header).
  const std::uint64_t align = std::min<std::uint64_t>(c.page_bytes, std::uint64_t{2} << 20);
  p.data_offset = round_up(p.entries_offset + c.max_entries * sizeof(tier_entry), align);
  p.segment_bytes = p.data_offset + p.data_bytes;
  return p;
}

void check_tier_name(const std::string& name) {
  HTP_EXPECTS(!name.empty() && name.size() <= 200, htp::invalid_argument, "shared tier name '",
              name, "': must be 1 to 200 characters (it is ", name.size(), ")");
  for (char ch : name) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    HTP_EXPECTS(ok, htp::invalid_argument, "shared tier name '", name,
                "': only letters, digits, '.', '_' and '-' are allowed");
  }
}

std::string segment_path(const std::string& shm_dir, const std::string& name) {
  return shm_dir + "/" + file_prefix + name;
}

bool slot_alive(const rank_slot& s) noexcept {
  return s.state.load(std::memory_order_acquire) == slot_live &&
         detail::process_alive(s.pid.load(std::memory_order_relaxed),
                               s.start_time.load(std::memory_order_relaxed));
}

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  std::uint64_t v = bytes;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  if (u == 0 && bytes >= (std::uint64_t{1} << 20)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return buf;
  }
  return detail::concat(v, " ", units[u]);
}

std::string describe_build(const char* version, std::uint32_t layout, std::uint64_t page_bytes) {
  return detail::concat("htp ", version, " (layout ", layout, ", page ", format_bytes(page_bytes),
                        ")");
}

bool header_unfinished(const segment_header& h) noexcept {
  for (char c : h.magic) {
    if (c != 0) return false;
  }
  return true;
}

std::string header_mismatch(const segment_header& h, std::size_t file_bytes) {
  if (std::memcmp(h.magic, segment_magic, sizeof segment_magic) != 0) {
    return "is not an htp shared tier (its magic number differs)";
  }
  char version[sizeof h.version + 1] = {};
  std::memcpy(version, h.version, sizeof h.version);
  const bool same = std::strcmp(version, HTP_VERSION_STRING) == 0 && h.layout == layout_version &&
                    h.layout_hash == compute_layout_hash();
  if (!same) {
    return detail::concat("was made by ", describe_build(version, h.layout, h.page_bytes),
                          " (layout hash ", h.layout_hash, "); this process is ",
                          describe_build(HTP_VERSION_STRING, layout_version, h.page_bytes),
                          " (layout hash ", compute_layout_hash(), ")");
  }
  if (h.segment_bytes != file_bytes || h.data_offset + h.data_bytes != h.segment_bytes ||
      h.entries_offset + h.max_entries * sizeof(tier_entry) > h.data_offset) {
    return detail::concat("is damaged: its header says ", h.segment_bytes,
                          " bytes but the file has ", file_bytes);
  }
  return "";
}

void init_header(segment_header* h, const shared_tier_config& c, const layout_plan& p) {
  std::snprintf(h->version, sizeof h->version, "%s", HTP_VERSION_STRING);
  h->layout = layout_version;
  h->layout_hash = compute_layout_hash();
  h->page_bytes = c.page_bytes;
  h->data_bytes = p.data_bytes;
  h->max_entries = c.max_entries;
  h->entries_offset = p.entries_offset;
  h->data_offset = p.data_offset;
  h->segment_bytes = p.segment_bytes;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  const int rc = pthread_mutex_init(&h->mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) {
    throw io_error(detail::concat("shared tier '", c.name,
                                  "': making its process-shared mutex "
                                  "failed: ",
                                  std::strerror(rc)),
                   "", rc);
  }
  // Last: a creator that dies before this line leaves a header that reads as unfinished. Readers
  // look at it only under the file's flock, which orders it after the fields above.
  std::memcpy(h->magic, segment_magic, sizeof segment_magic);
}

void check_shm_space(const std::string& shm_dir, std::uint64_t bytes, std::uint64_t reusable) {
  struct statvfs vfs {};
  if (::statvfs(shm_dir.c_str(), &vfs) != 0) {
    const int e = errno;
    throw io_error(detail::concat("shared tier: statvfs of '", shm_dir, "' failed: ",
                                  std::strerror(e), " (is shm_dir a mounted directory?)"),
                   shm_dir, e);
  }
  const std::uint64_t avail =
      static_cast<std::uint64_t>(vfs.f_bavail) * static_cast<std::uint64_t>(vfs.f_frsize) +
      reusable;
  if (avail >= bytes) return;
  const std::uint64_t gib = (bytes + (std::uint64_t{1} << 30) - 1) >> 30;
  throw out_of_memory(
      detail::concat("shared tier: a segment of ", bytes, " bytes (", format_bytes(bytes),
                     ") does not fit in ", shm_dir, ", which has ", avail, " bytes (",
                     format_bytes(avail), ") free: raise it: docker run --shm-size=", gib + 1,
                     "g, or mount -o remount,size=", gib + 1, "G ", shm_dir,
                     " (or make the tier smaller)"),
      bytes);
}

std::string memlock_advice(std::uint64_t bytes) {
  const std::uint64_t kib = (bytes + 1023) / 1024;
  return detail::concat("raise the memlock limit: ulimit -l ", kib,
                        " (or unlimited), or docker run --ulimit memlock=-1; or open the tier "
                        "without lock_in_memory");
}

void check_memlock(std::uint64_t bytes) {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  if (static_cast<std::uint64_t>(rl.rlim_cur) >= bytes) return;
  throw out_of_memory(
      detail::concat("shared tier: lock_in_memory needs ", bytes, " bytes (", format_bytes(bytes),
                     ") locked but RLIMIT_MEMLOCK allows ", static_cast<std::uint64_t>(rl.rlim_cur),
                     " bytes: ", memlock_advice(bytes)),
      bytes);
}

void reclaim_slot(segment_header* h, std::size_t s) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << s;
  tier_entry* e = entries_of(h);
  for (std::uint64_t i = 0; i < h->max_entries; ++i) {
    const std::uint32_t st = e[i].state.load(std::memory_order_relaxed);
    if (st == entry_free) continue;
    const std::uint64_t holders = e[i].holders.fetch_and(~bit, std::memory_order_relaxed) & ~bit;
    const bool orphan = st == entry_ready && holders == 0;
    const bool abandoned = st == entry_filling && e[i].filler == s;
    if (orphan || abandoned) {
      e[i].holders.store(0, std::memory_order_relaxed);
      e[i].state.store(entry_free, std::memory_order_release);
    }
  }
  for (detail::link_cell& cell : h->links) detail::link_cell_forget_slot(cell, s);
  rank_slot& r = h->ranks[s];
  r.pid.store(0, std::memory_order_relaxed);
  r.start_time.store(0, std::memory_order_relaxed);
  r.state.store(slot_free, std::memory_order_release);
}

std::size_t reclaim_dead(segment_header* h) noexcept {
  std::size_t live = 0;
  const pid_t self = ::getpid();
  for (std::size_t s = 0; s < shared_tier::max_ranks; ++s) {
    rank_slot& r = h->ranks[s];
    if (r.state.load(std::memory_order_acquire) != slot_live) continue;
    const bool ours = r.pid.load(std::memory_order_relaxed) == self;
    if (ours || slot_alive(r)) {
      ++live;
    } else {
      reclaim_slot(h, s);
    }
  }
  return live;
}

void count_into(const segment_header* h, shared_tier_listing& out) noexcept {
  for (const rank_slot& r : h->ranks) {
    if (r.state.load(std::memory_order_acquire) != slot_live) continue;
    if (slot_alive(r)) {
      ++out.live_ranks;
    } else {
      ++out.dead_ranks;
    }
  }
  const tier_entry* e = entries_of(h);
  for (std::uint64_t i = 0; i < h->max_entries; ++i) {
    if (e[i].state.load(std::memory_order_acquire) != entry_ready) continue;
    ++out.entries;
    out.entry_bytes += e[i].bytes;
  }
  out.stale = out.live_ranks == 0;
}

void flock_with_deadline(int fd, const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return;
    const int e = errno;
    if (e != EWOULDBLOCK && e != EINTR) {
      throw io_error(
          detail::concat("shared tier: flock of '", path, "' failed: ", std::strerror(e)), path, e);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw htp::logic_error(detail::concat(
          "shared tier: '", path, "' stayed locked by another process for ", timeout.count(),
          " ms (a process is making, attaching to or closing it and did not finish; raise "
          "shared_tier_config::timeout, or find the process with fuser ",
          path, ")"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

void lock_segment(segment_header* h, std::chrono::milliseconds timeout) {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  const auto ms = timeout.count();
  ts.tv_sec += static_cast<time_t>(ms / 1000);
  ts.tv_nsec += static_cast<long>((ms % 1000) * 1000000);
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000;
  }
#if HTP_TIER_TSAN
  // ThreadSanitizer's pthread_mutex_timedlock does not see EOWNERDEAD as a lock (its unlock would
  // then be reported); its pthread_mutex_lock does. Under TSan the wait has no deadline.
  const int rc = ::pthread_mutex_lock(&h->mutex);
#else
  const int rc = ::pthread_mutex_timedlock(&h->mutex, &ts);
#endif
  if (rc == 0) return;
  if (rc == EOWNERDEAD) {
    // Its holder died: the state it guarded is checked slot by slot (every change is one store of
    // an entry's state), and the dead process's slot is taken back.
    reclaim_dead(h);
    ::pthread_mutex_consistent(&h->mutex);
    return;
  }
  if (rc == ETIMEDOUT) {
    throw htp::logic_error(detail::concat(
        "shared tier: its lock stayed held by another process for ", ms,
        " ms (a process is stopped while holding it? raise shared_tier_config::timeout)"));
  }
  throw htp::logic_error(detail::concat(
      "shared tier: its lock cannot be taken: ", std::strerror(rc),
      rc == ENOTRECOVERABLE ? " (remove the tier with htp-tier remove --force)" : ""));
}

void unlock_segment(segment_header* h) noexcept { ::pthread_mutex_unlock(&h->mutex); }

std::vector<std::uint64_t> first_fit(const segment_header* h,
                                     const std::vector<std::uint64_t>& extents, std::uint64_t& used,
                                     std::uint64_t& free_bytes, std::uint64_t& largest) {
  // The entry table is the allocation record: the free extents are the gaps between the extents
  // of non-free entries, so a process dying mid-change leaves nothing to repair but the entries.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> taken;  // offset, extent
  const tier_entry* e = entries_of(h);
  for (std::uint64_t i = 0; i < h->max_entries; ++i) {
    if (e[i].state.load(std::memory_order_relaxed) == entry_free) continue;
    taken.emplace_back(e[i].offset, e[i].extent);
  }
  std::sort(taken.begin(), taken.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> gaps;  // offset, bytes
  std::uint64_t at = 0;
  used = 0;
  for (const auto& t : taken) {
    if (t.first > at) gaps.emplace_back(at, t.first - at);
    at = std::max(at, t.first + t.second);
    used += t.second;
  }
  if (h->data_bytes > at) gaps.emplace_back(at, h->data_bytes - at);
  free_bytes = h->data_bytes - used;
  largest = 0;
  for (const auto& g : gaps) largest = std::max(largest, g.second);
  std::vector<std::uint64_t> out;
  out.reserve(extents.size());
  for (std::uint64_t want : extents) {
    auto it =
        std::find_if(gaps.begin(), gaps.end(), [&](const auto& g) { return g.second >= want; });
    if (it == gaps.end()) return {};
    out.push_back(it->first);
    it->first += want;
    it->second -= want;
  }
  return out;
}

}  // namespace htp::shared_tier_detail
