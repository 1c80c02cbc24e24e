// shared_tier::open and close: the segment file under its flock, made, attached to or remade when
// stale; the rank slot taken and given back (docs/multi_gpu.md, "A process per GPU").
#include "shared_tier/tier_impl.hpp"

#include "process_liveness.hpp"

#include <htp/detail/check.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace htp {

using namespace shared_tier_detail;

namespace {

[[noreturn]] void throw_sys(const std::string& what, const std::string& path, int e) {
  throw io_error(detail::concat("shared tier: ", what, " '", path, "' failed: ", std::strerror(e)),
                 path, e);
}

void check_config(const shared_tier_config& c) {
  check_tier_name(c.name);
  HTP_EXPECTS(c.bytes > 0, htp::invalid_argument, "shared tier '", c.name, "': bytes must be > 0");
  const bool pow2 = c.page_bytes != 0 && (c.page_bytes & (c.page_bytes - 1)) == 0;
  HTP_EXPECTS(
      pow2 && c.page_bytes >= (std::size_t{4} << 10) && c.page_bytes <= (std::size_t{1} << 30),
      htp::invalid_argument, "shared tier '", c.name, "': page_bytes ", c.page_bytes,
      " must be a power of two from 4 KiB to 1 GiB");
  HTP_EXPECTS(c.max_entries > 0 && c.max_entries <= (std::size_t{1} << 24), htp::invalid_argument,
              "shared tier '", c.name, "': max_entries ", c.max_entries, " must be 1 to 16777216");
  HTP_EXPECTS(c.timeout.count() > 0, htp::invalid_argument, "shared tier '", c.name,
              "': timeout must be > 0");
}

/// A mapping of the whole segment, unmapped when the last owner (the tier, a link) lets go.
std::shared_ptr<segment_header> map_segment(int fd, std::size_t bytes, const std::string& path) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw_sys("mmap of", path, errno);
  return std::shared_ptr<segment_header>(static_cast<segment_header*>(p),
                                         [bytes](segment_header* h) { ::munmap(h, bytes); });
}

/// Reads the header of an existing segment of `size` bytes: "" and the mapping if it is usable,
/// else the mapping is null and the string says why ("unfinished" for a creator that died).
std::shared_ptr<segment_header> map_existing(int fd, std::size_t size, const std::string& path,
                                             std::string& problem) {
  problem.clear();
  if (size < sizeof(segment_header)) {
    problem = detail::concat("is not an htp shared tier (", size, " bytes, shorter than a header)");
    return nullptr;
  }
  std::shared_ptr<segment_header> head = map_segment(fd, sizeof(segment_header), path);
  if (header_unfinished(*head)) {
    problem = "unfinished";
    return nullptr;
  }
  problem = header_mismatch(*head, size);
  if (!problem.empty()) return nullptr;
  head.reset();
  return map_segment(fd, size, path);
}

/// Takes a free rank slot for this process. Caller holds the segment's mutex.
std::size_t take_slot(segment_header* h, const std::string& name) {
  for (std::size_t s = 0; s < shared_tier::max_ranks; ++s) {
    rank_slot& r = h->ranks[s];
    if (r.state.load(std::memory_order_relaxed) != slot_free) continue;
    r.pid.store(::getpid(), std::memory_order_relaxed);
    r.start_time.store(detail::process_start_time(::getpid()), std::memory_order_relaxed);
    r.state.store(slot_live, std::memory_order_release);
    return s;
  }
  throw htp::logic_error(detail::concat("shared tier '", name, "': all ", shared_tier::max_ranks,
                                        " rank slots are taken by live processes"));
}

void check_same_config(const segment_header* h, const shared_tier_config& c, const layout_plan& p) {
  const bool same = h->page_bytes == c.page_bytes && h->data_bytes == p.data_bytes &&
                    h->max_entries == c.max_entries;
  HTP_EXPECTS(same, htp::invalid_argument, "shared tier '", c.name, "' was made with ",
              h->data_bytes, " bytes, page ", format_bytes(h->page_bytes), ", ", h->max_entries,
              " entries; this process asks for ", p.data_bytes, " bytes, page ",
              format_bytes(c.page_bytes), ", ", c.max_entries,
              " entries: every process must pass the same config (close every process using it, "
              "or remove it with htp-tier remove ",
              c.name, ")");
}

/// Unlinks `path` if it still names the file open as `fd` (not one made after a forced removal).
void unlink_if_ours(int fd, const std::string& path) noexcept {
  struct stat mine {};
  struct stat named {};
  if (::fstat(fd, &mine) != 0 || ::stat(path.c_str(), &named) != 0) return;
  if (mine.st_dev == named.st_dev && mine.st_ino == named.st_ino) ::unlink(path.c_str());
}

}  // namespace

shared_tier::impl::~impl() {
  if (fd >= 0) ::close(fd);
}

/// Makes the segment anew in the locked, open file (empty or stale).
void shared_tier::impl::create(std::uint64_t reusable) {
  check_shm_space(config.shm_dir, plan.segment_bytes, reusable);
  if (::ftruncate(fd, 0) != 0 || ::ftruncate(fd, static_cast<off_t>(plan.segment_bytes)) != 0) {
    throw_sys("ftruncate of", path, errno);
  }
  map = map_segment(fd, plan.segment_bytes, path);
  init_header(map.get(), config, plan);
  made = true;
}

/// Attaches to (or remakes) the segment in the locked, open file of `size` bytes (`allocated`:
/// the bytes it occupies, reusable when it is remade).
void shared_tier::impl::attach_or_create(std::size_t size, std::uint64_t allocated) {
  if (size == 0) {
    create(0);
    return;
  }
  std::string problem;
  map = map_existing(fd, size, path, problem);
  if (problem == "unfinished") {
    create(allocated);
    return;
  }
  HTP_EXPECTS(map != nullptr, htp::invalid_argument, "shared tier '", config.name, "' (", path,
              ") ", problem, ": close every process using it, or remove it with htp-tier remove ",
              config.name, " --force");
  lock_segment(map.get(), config.timeout);
  const std::size_t live = reclaim_dead(map.get());
  unlock_segment(map.get());
  if (live == 0) {  // stale: left by processes that died; made anew
    map.reset();
    create(allocated);
    return;
  }
  check_same_config(map.get(), config, plan);
}

void shared_tier::impl::open_locked() {
  for (;;) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) throw_sys("open of", path, errno);
    flock_with_deadline(fd, path, config.timeout);
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_sys("fstat of", path, errno);
    if (st.st_nlink > 0) {
      attach_or_create(static_cast<std::size_t>(st.st_size),
                       static_cast<std::uint64_t>(st.st_blocks) * 512);
      return;
    }
    ::close(fd);  // unlinked by its last process while we waited: open the path again
    fd = -1;
  }
}

std::unique_ptr<shared_tier> shared_tier::open(const shared_tier_config& config) {
  check_config(config);
  auto p = std::make_unique<impl>();
  p->config = config;
  p->plan = plan_layout(config);
  p->path = segment_path(config.shm_dir, config.name);
  if (config.lock_in_memory) check_memlock(p->plan.segment_bytes);
  struct stat st {};
  if (::stat(p->path.c_str(), &st) != 0) {
    check_shm_space(config.shm_dir, p->plan.segment_bytes, 0);  // before making the file
  }
  try {
    p->open_locked();
    if (config.lock_in_memory && ::mlock(p->map.get(), p->plan.segment_bytes) != 0) {
      const int e = errno;
      throw out_of_memory(detail::concat("shared tier '", config.name, "': mlock of ",
                                         p->plan.segment_bytes, " bytes failed (", std::strerror(e),
                                         "): ", memlock_advice(p->plan.segment_bytes)),
                          p->plan.segment_bytes);
    }
    lock_segment(p->map.get(), config.timeout);
    try {
      p->slot = take_slot(p->map.get(), config.name);
    } catch (...) {
      unlock_segment(p->map.get());
      throw;
    }
    unlock_segment(p->map.get());
  } catch (...) {
    p->abandon();
    throw;
  }
  ::flock(p->fd, LOCK_UN);
  return std::unique_ptr<shared_tier>(new shared_tier(std::move(p)));
}

/// After a failed open, still under the flock: a segment no live process uses is unlinked (one
/// this call made, or an empty file it created), so a failure leaves nothing behind.
void shared_tier::impl::abandon() noexcept {
  if (fd < 0) return;
  bool unused = false;
  if (map != nullptr) {
    try {
      lock_segment(map.get(), config.timeout);
      unused = reclaim_dead(map.get()) == 0;
      unlock_segment(map.get());
    } catch (...) {
      unused = false;
    }
  } else {
    struct stat st {};
    unused = ::fstat(fd, &st) == 0 && st.st_size == 0 && st.st_nlink > 0;
  }
  if (unused && (made || map == nullptr)) unlink_if_ours(fd, path);
  map.reset();
  ::close(fd);
  fd = -1;
}

shared_tier::shared_tier(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

shared_tier::~shared_tier() {
  impl& p = *impl_;
  std::lock_guard<std::mutex> local(p.local);
  bool flocked = false;
  try {
    flock_with_deadline(p.fd, p.path, p.config.timeout);
    flocked = true;
  } catch (...) {
    flocked = false;  // give the slot back anyway; the next open unlinks a stale segment
  }
  std::size_t live = 1;
  try {
    lock_segment(p.map.get(), p.config.timeout);
    reclaim_slot(p.map.get(), p.slot);
    live = reclaim_dead(p.map.get());
    unlock_segment(p.map.get());
  } catch (...) {
    live = 1;
  }
  if (flocked && live == 0) unlink_if_ours(p.fd, p.path);
  if (p.config.lock_in_memory) ::munlock(p.map.get(), p.plan.segment_bytes);
  p.map.reset();  // unmapped here unless a link still holds it
  ::close(p.fd);  // drops the flock
  p.fd = -1;
}

}  // namespace htp
