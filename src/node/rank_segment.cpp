// The shared-memory rendezvous of sim collectives across processes. See Note [Sim collectives
// across processes] in rank_segment.hpp.
#include "rank_segment.hpp"

#include <htp/detail/check.hpp>

#include "log.hpp"
#include "process_liveness.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

namespace htp::detail {

namespace {

constexpr std::uint64_t segment_magic = 0x68'74'70'63'6f'6c'6c'31;  // "htpcoll1"
constexpr std::size_t reason_bytes = 1024;
constexpr auto check_every = std::chrono::milliseconds(20);

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the segment needs lock-free words");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "the segment needs lock-free words");

[[noreturn]] void throw_errno(const std::string& what, const std::string& path) {
  const int e = errno;
  throw io_error(concat(what, " ", path, ": ", std::strerror(e)), path, e);
}

constexpr std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

}  // namespace

struct rank_segment::header {
  std::atomic<std::uint64_t> magic;  // segment_magic once the fields below are set
  std::uint64_t world;
  std::uint64_t staging;
  std::atomic<std::uint32_t> epoch;        // futex word: changes on every change of the segment
  std::atomic<std::uint32_t> abort_state;  // 0: running; 1: a reason is being written; 2: aborted
  char reason[reason_bytes];
};

std::size_t sim_rank_staging_bytes() {
  const char* env = std::getenv("HTP_SIM_RANK_STAGING_BYTES");
  if (env == nullptr || *env == '\0') return std::size_t{16} << 20;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(env, &end, 10);
  HTP_EXPECTS(errno == 0 && end != env && *end == '\0' && v <= (std::size_t{1} << 40),
              invalid_argument, "HTP_SIM_RANK_STAGING_BYTES=", env,
              ": give the staging bytes per rank as a decimal number (at most 2^40)");
  return round_up(std::max<std::size_t>(v, 64), 64);
}

rank_segment::rank_segment(const std::string& name, std::size_t rank, std::size_t world,
                           clock::duration timeout)
    : path_("/dev/shm/htp-coll." + name), shm_name_("/htp-coll." + name), rank_(rank),
      world_(world), timeout_(timeout) {
  try {
    open_or_create(clock::now() + timeout);
    claim();
  } catch (...) {
    if (map_) munmap(map_, map_bytes_);
    if (fd_ >= 0) close(fd_);
    throw;
  }
}

namespace {

std::size_t records_at() { return 4096; }  // the header fits in the first page
std::size_t staging_at(std::size_t world) {
  return round_up(records_at() + world * sizeof(rank_record), 4096);
}
std::size_t segment_bytes(std::size_t world, std::size_t staging) {
  return staging_at(world) + world * staging;
}

}  // namespace

void rank_segment::open_or_create(clock::time_point deadline) {
  static_assert(sizeof(header) <= 4096, "the header fits in the first page");
  for (;;) {
    fd_ = shm_open(shm_name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd_ >= 0) return create(sim_rank_staging_bytes());
    if (errno != EEXIST) throw_errno("make_sim_rank_collectives: cannot create", path_);
    fd_ = shm_open(shm_name_.c_str(), O_RDWR, 0600);
    if (fd_ >= 0) return open_existing(deadline);
    if (errno != ENOENT) throw_errno("make_sim_rank_collectives: cannot open", path_);
    // Removed between the two opens (its last rank left): make it anew.
    HTP_EXPECTS(clock::now() < deadline, logic_error, "make_sim_rank_collectives: ", path_,
                " kept appearing and disappearing until the rendezvous timeout ran out");
  }
}

void rank_segment::create(std::size_t staging) {
  staging_ = staging;
  map_bytes_ = segment_bytes(world_, staging_);
  if (ftruncate(fd_, static_cast<off_t>(map_bytes_)) != 0) {
    const int e = errno;
    shm_unlink(shm_name_.c_str());
    errno = e;
    throw_errno("make_sim_rank_collectives: cannot size", path_);
  }
  // Commit the memory now: a /dev/shm too small for it fails here, not as SIGBUS later.
  const int e = posix_fallocate(fd_, 0, static_cast<off_t>(map_bytes_));
  if (e == ENOSPC || e == ENOMEM) {
    shm_unlink(shm_name_.c_str());
    throw io_error(concat("make_sim_rank_collectives: /dev/shm has no room for ", map_bytes_,
                          " bytes (", world_, " ranks x ", staging_,
                          " staging bytes); free some, or set HTP_SIM_RANK_STAGING_BYTES lower"),
                   path_, e);
  }
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    shm_unlink(shm_name_.c_str());
    throw_errno("make_sim_rank_collectives: cannot map", path_);
  }
  hdr_ = new (map_) header{};
  hdr_->world = world_;
  hdr_->staging = staging_;
  for (std::size_t r = 0; r < world_; ++r) new (&record(r)) rank_record{};
  hdr_->magic.store(segment_magic, std::memory_order_release);
}

void rank_segment::open_existing(clock::time_point deadline) {
  struct stat st {};
  // The creator sizes the segment, then publishes its header: wait for both.
  for (;;) {
    if (fstat(fd_, &st) != 0) throw_errno("make_sim_rank_collectives: cannot stat", path_);
    if (static_cast<std::size_t>(st.st_size) >= records_at()) {
      if (!map_) {
        map_bytes_ = records_at();
        map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
        if (map_ == MAP_FAILED) {
          map_ = nullptr;
          throw_errno("make_sim_rank_collectives: cannot map", path_);
        }
        hdr_ = static_cast<header*>(map_);
      }
      if (hdr_->magic.load(std::memory_order_acquire) == segment_magic) break;
    }
    HTP_EXPECTS(clock::now() < deadline, logic_error, "make_sim_rank_collectives: ", path_,
                " exists but was not initialised within the rendezvous timeout (a rank that made "
                "it died?); remove it and start every rank again");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  HTP_EXPECTS(hdr_->world == world_, logic_error, "make_sim_rank_collectives: ", path_,
              " is a world of ", hdr_->world, " ranks, and rank ", rank_, " asked for a world of ",
              world_, "; every rank must give the same world size (or use another name)");
  staging_ = hdr_->staging;
  munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = segment_bytes(world_, staging_);
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw_errno("make_sim_rank_collectives: cannot map", path_);
  }
  hdr_ = static_cast<header*>(map_);
}

void rank_segment::claim() {
  rank_record& me = record(rank_);
  std::uint32_t free_state = 0;
  if (!me.state.compare_exchange_strong(free_state, 1)) {
    // Its pid is being written (microseconds), unless its process died in between: bounded.
    const auto until = clock::now() + std::chrono::seconds(1);
    while (me.state.load() == 1 && clock::now() < until) std::this_thread::yield();
    const std::int64_t pid = me.pid;
    throw logic_error(concat("make_sim_rank_collectives: rank ", rank_, " of ", path_,
                             " was already joined by pid ", pid,
                             process_alive(pid, me.start_time) ? " (still running)"
                                                               : " (gone: a stale segment; "
                                                                 "remove it)",
                             "; every rank joins once"));
  }
  me.pid = static_cast<std::int64_t>(getpid());
  me.start_time = process_start_time(me.pid);
  me.state.store(2);
  claimed_ = true;
  notify();
}

rank_segment::~rank_segment() {
  if (claimed_) {
    record(rank_).left.store(1);
    notify();
    if (last_to_leave()) {
      // Remove the name only if it is still this segment (not a new world's of the same name).
      struct stat mine {
      }, named{};
      if (fstat(fd_, &mine) == 0 && stat(path_.c_str(), &named) == 0 &&
          mine.st_ino == named.st_ino && mine.st_dev == named.st_dev) {
        shm_unlink(shm_name_.c_str());
      }
    }
  }
  if (map_) munmap(map_, map_bytes_);
  if (fd_ >= 0) close(fd_);
}

bool rank_segment::last_to_leave() const noexcept {
  for (std::size_t r = 0; r < world_; ++r) {
    const rank_record& rec = record(r);
    const std::uint32_t st = rec.state.load();
    if (st == 0 || rec.left.load() == 1) continue;
    if (st == 1) return false;
    if (process_alive(rec.pid, rec.start_time)) return false;
  }
  return true;
}

rank_record& rank_segment::record(std::size_t r) const noexcept {
  return reinterpret_cast<rank_record*>(static_cast<unsigned char*>(map_) + records_at())[r];
}

unsigned char* rank_segment::staging_area(std::size_t r) const noexcept {
  return static_cast<unsigned char*>(map_) + staging_at(world_) + r * staging_;
}

bool rank_segment::aborted() const noexcept { return hdr_->abort_state.load() != 0; }

std::string rank_segment::reason() const {
  if (hdr_->abort_state.load() == 0) return {};
  // The aborting rank writes the reason between states 1 and 2: a few microseconds.
  const auto until = clock::now() + std::chrono::seconds(1);
  while (hdr_->abort_state.load(std::memory_order_acquire) != 2 && clock::now() < until)
    std::this_thread::yield();
  if (hdr_->abort_state.load(std::memory_order_acquire) != 2)
    return "an abort whose reason was never written (its rank died while aborting)";
  return std::string(hdr_->reason, strnlen(hdr_->reason, reason_bytes));
}

void rank_segment::abort(const std::string& why) noexcept {
  std::uint32_t running = 0;
  if (hdr_->abort_state.compare_exchange_strong(running, 1)) {
    const std::size_t n = std::min(why.size(), reason_bytes - 1);
    std::memcpy(hdr_->reason, why.data(), n);
    hdr_->reason[n] = '\0';
    hdr_->abort_state.store(2, std::memory_order_release);
    try {
      logger().error("sim collectives across processes aborted: {}", why);
    } catch (...) {  // the flag is what matters
    }
  }
  notify();
}

void rank_segment::notify() noexcept {
  hdr_->epoch.fetch_add(1);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&hdr_->epoch), FUTEX_WAKE, INT_MAX, nullptr,
          nullptr, 0);
}

std::string rank_segment::not_ready(const std::function<bool(const rank_record&)>& ready) const {
  std::string late;
  for (std::size_t r = 0; r < world_; ++r) {
    if (!ready(record(r))) late += (late.empty() ? "" : ", ") + std::to_string(r);
  }
  return late;
}

void rank_segment::check_ranks(const std::function<bool(const rank_record&)>& ready,
                               const std::string& during) {
  for (std::size_t r = 0; r < world_; ++r) {
    const rank_record& rec = record(r);
    if (r == rank_ || ready(rec) || rec.state.load() != 2) continue;
    if (rec.left.load() == 1) {
      abort(concat("rank ", r, " (pid ", rec.pid, ") left (its collectives were destroyed) before ",
                   during, ", which rank ", rank_, " waited at"));
      return;
    }
    if (!process_alive(rec.pid, rec.start_time)) {
      abort(concat("rank ", r, " (pid ", rec.pid, ") died during ", during));
      return;
    }
  }
}

bool rank_segment::wait_all(const std::function<bool(const rank_record&)>& ready,
                            const std::string& during, const std::atomic<bool>& stop) {
  const clock::time_point start = clock::now();
  const clock::time_point deadline = start + timeout_;
  clock::time_point next_check = start + check_every;
  for (;;) {
    const std::uint32_t seen = hdr_->epoch.load(std::memory_order_acquire);
    bool all = true;
    for (std::size_t r = 0; r < world_ && all; ++r) all = ready(record(r));
    if (all) return true;
    if (aborted() || stop.load()) return false;
    const clock::time_point now = clock::now();
    if (now >= next_check) {
      check_ranks(ready, during);
      next_check = now + check_every;
      continue;
    }
    if (now >= deadline) {
      abort(concat("rank ", rank_, " waited ", std::chrono::duration<double>(timeout_).count(),
                   " s at ", during, " for rank(s) ", not_ready(ready), " of ", world_,
                   "; the rendezvous timeout of make_sim_rank_collectives ran out"));
      return false;
    }
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::min(next_check, deadline) - now)
            .count();
    timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&hdr_->epoch), FUTEX_WAIT, seen, &ts,
            nullptr, 0);
  }
}

void rank_segment::wait_joined() {
  const std::atomic<bool> never{false};
  const bool joined = wait_all([](const rank_record& r) { return r.state.load() == 2; },
                               "the join (make_sim_rank_collectives)", never);
  HTP_EXPECTS(joined, logic_error, "make_sim_rank_collectives: rank ", rank_, " of ", world_,
              " on ", path_, " could not join: ", reason());
}

}  // namespace htp::detail
