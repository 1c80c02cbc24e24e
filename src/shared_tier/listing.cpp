// list_shared_tiers and remove_shared_tier: what the htp-tier CLI shows and removes. They read a
// segment's header and rank slots without its mutex (a snapshot), and remove under its flock, so
// a removal never races with a process making or attaching to the segment.
#include "shared_tier/segment.hpp"

#include <htp/detail/check.hpp>
#include <htp/shared_tier.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace htp {

using namespace shared_tier_detail;

namespace {

/// Reads the segment at `path` (an open fd) into `out`; sets out.problem if it cannot.
void read_segment(int fd, shared_tier_listing& out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    out.problem = detail::concat("fstat failed: ", std::strerror(errno));
    return;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  out.segment_bytes = size;
  if (size < sizeof(segment_header)) {
    out.problem = size == 0 ? "empty (being made, or its maker died)" : "shorter than a header";
    out.stale = size == 0;
    return;
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    out.problem = detail::concat("mmap failed: ", std::strerror(errno));
    return;
  }
  const auto* h = static_cast<const segment_header*>(m);
  if (header_unfinished(*h)) {
    out.problem = "unfinished (its maker died while making it)";
    out.stale = true;
  } else {
    out.problem = header_mismatch(*h, size);
    if (out.problem.empty()) count_into(h, out);
  }
  ::munmap(m, size);
}

}  // namespace

std::vector<shared_tier_listing> list_shared_tiers(const std::string& shm_dir) {
  std::vector<shared_tier_listing> out;
  DIR* dir = ::opendir(shm_dir.c_str());
  if (dir == nullptr) return out;
  const std::string prefix = file_prefix;
  while (const dirent* d = ::readdir(dir)) {
    const std::string file = d->d_name;
    if (file.size() <= prefix.size() || file.compare(0, prefix.size(), prefix) != 0) continue;
    shared_tier_listing l;
    l.name = file.substr(prefix.size());
    l.path = shm_dir + "/" + file;
    const int fd = ::open(l.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (fd < 0) {
      l.problem = detail::concat("cannot open: ", std::strerror(errno));
    } else if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      l.problem = "not a regular file";
    } else {
      read_segment(fd, l);
    }
    if (fd >= 0) ::close(fd);
    out.push_back(std::move(l));
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end(), [](const shared_tier_listing& a, const shared_tier_listing& b) {
    return a.name < b.name;
  });
  return out;
}

bool remove_shared_tier(const std::string& name, bool force, const std::string& shm_dir) {
  check_tier_name(name);
  const std::string path = segment_path(shm_dir, name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    const int e = errno;
    throw io_error(
        detail::concat("remove_shared_tier: open of '", path, "' failed: ", std::strerror(e)), path,
        e);
  }
  struct fd_closer {
    int fd;
    ~fd_closer() { ::close(fd); }
  } closer{fd};
  flock_with_deadline(fd, path, std::chrono::seconds(10));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_nlink == 0) return false;  // gone meanwhile
  shared_tier_listing l;
  read_segment(fd, l);
  if (!force) {
    HTP_EXPECTS(l.problem.empty() || l.stale, htp::logic_error, "remove_shared_tier: '", path, "' ",
                l.problem,
                ": htp cannot tell whether processes use it; remove it with --force "
                "(force = true) once none does");
    HTP_EXPECTS(l.stale, htp::logic_error, "remove_shared_tier: '", path, "' is used by ",
                l.live_ranks,
                " live process(es): close them first, or force the removal (they "
                "keep their mapping)");
  }
  if (::unlink(path.c_str()) != 0) {
    const int e = errno;
    throw io_error(
        detail::concat("remove_shared_tier: unlink of '", path, "' failed: ", std::strerror(e)),
        path, e);
  }
  return true;
}

}  // namespace htp
