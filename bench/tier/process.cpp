// What the launcher and the ranks need of the operating system: spawning this binary, waiting with
// a deadline, reading /proc for memory, and JSON files.
#include "tier/tier_bench.hpp"

#include <htp/error.hpp>
#include <htp/token_bucket.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

extern char** environ;

namespace htp::bench::tier {

namespace {
std::uint64_t kib_field(const std::string& text, const char* key) {
  const auto at = text.find(key);
  if (at == std::string::npos) return 0;
  return std::strtoull(text.c_str() + at + std::strlen(key), nullptr, 10) * 1024;
}
}  // namespace

process_memory memory_of_self() {
  std::ifstream f("/proc/self/smaps_rollup");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  process_memory m;
  m.rss = kib_field(text, "\nRss:");
  m.pss = kib_field(text, "\nPss:");
  m.private_bytes = kib_field(text, "\nPrivate_Clean:") + kib_field(text, "\nPrivate_Dirty:");
  m.shared_bytes = kib_field(text, "\nShared_Clean:") + kib_field(text, "\nShared_Dirty:");
  m.anonymous_bytes = kib_field(text, "\nAnonymous:");
  return m;
}

std::uint64_t page_cache_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  std::uint64_t resident = 0;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const auto bytes = static_cast<std::size_t>(st.st_size);
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
      std::vector<unsigned char> in((bytes + page - 1) / page);
      if (::mincore(map, bytes, in.data()) == 0) {
        for (unsigned char c : in) resident += (c & 1) ? page : 0;
      }
      ::munmap(map, bytes);
    }
  }
  ::close(fd);
  return resident;
}

std::uint64_t allocated_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : 0;
}

int spawn_self(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"/proc/self/exe"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int e = ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ);
  if (e != 0)
    throw io_error(std::string("htp-tier-bench: cannot spawn a rank: ") + std::strerror(e),
                   "/proc/self/exe", e);
  return pid;
}

std::vector<int> wait_all(const std::vector<int>& pids, std::int64_t deadline_ns,
                          const std::function<void()>& on_poll) {
  std::vector<int> status(pids.size(), 0);
  std::vector<bool> done(pids.size(), false);
  std::size_t left = pids.size();
  while (left > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      int st = 0;
      if (done[i] || ::waitpid(pids[i], &st, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --left;
      status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    }
    if (left == 0) break;
    if (token_bucket::steady_clock_ns() > deadline_ns) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        status[i] = -9999;
      }
      break;
    }
    if (on_poll) on_poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a poll of child processes
  }
  return status;
}

void write_json(const nlohmann::json& j, const std::string& path) {
  if (path.empty()) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) throw io_error("htp-tier-bench: cannot write " + tmp, tmp, errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw io_error("htp-tier-bench: cannot rename " + tmp, path, errno);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw io_error("htp-tier-bench: cannot read " + path, path, errno);
  return nlohmann::json::parse(f);
}

}  // namespace htp::bench::tier
