// A child process for tests/shared_tier_test.cpp: the test spawns it (posix_spawn) as another
// rank of a shared tier. Usage: shared_tier_child MODE SHM_DIR TIER [ARGS...]; it reports through
// its exit code (0 fine, 3 a checksum differed, 4 a wait ran past its deadline, 5 an exception, 2
// bad usage) and through files named on its command line.
//   race  SHM_DIR TIER GO_FILE RESULT_FILE END_FILE
//                                              waits for GO_FILE, publishes the race batch, writes
//                                              "<filled 0|1> <checksum>" to RESULT_FILE, holds the
//                                              batch until END_FILE appears
//   loop  SHM_DIR TIER READY_FILE STOP_FILE    publish/find/release/checksum in a loop; writes
//                                              READY_FILE after 20 rounds, stops 20 rounds after
//                                              STOP_FILE appears (or at 60 s)
//   die_after_open SHM_DIR TIER                opens the tier and dies (SIGKILL)
//   die_holding_lock SHM_DIR TIER              opens the tier, locks its mutex and dies
//   die_filling SHM_DIR TIER                   publishes "f" and dies inside fill
#include "shared_tier/segment.hpp"
#include "shared_tier_common.hpp"

#include <htp/checksum.hpp>
#include <htp/shared_tier.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace htp::tier_test;

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

/// Waits (bounded) for the parent to make `path`.
bool wait_for(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

int race(const htp::shared_tier_config& c, const std::string& go, const std::string& result,
         const std::string& end) {
  auto tier = htp::shared_tier::open(c);
  if (!wait_for(go)) return 4;
  int filled = 0;
  std::vector<htp::shared_entry> got = tier->publish(race_batch(), [&](auto& entries) {
    filled = 1;
    fill_entries(entries);
  });
  if (!entries_intact(got)) return 3;
  write_file(result, std::to_string(filled) + " " + std::to_string(batch_checksum(got)));
  return wait_for(end) ? 0 : 4;  // holds the batch until every rank has it
}

/// One round of the loop: publish entry k, check it, look at entry k+1, release both.
bool loop_round(htp::shared_tier& tier, int k) {
  std::vector<htp::shared_entry> got = tier.publish({loop_request(k)}, fill_entries);
  bool ok = entries_intact(got);
  const htp::shared_entry other = tier.find(loop_request(k + 1).name);
  if (other.data != nullptr) {
    ok = ok && entries_intact({other});
    tier.release(other.name);
  }
  tier.release(got[0].name);
  return ok;
}

int loop(const htp::shared_tier_config& c, const std::string& ready, const std::string& stop) {
  auto tier = htp::shared_tier::open(c);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int after_stop = -1;
  for (int round = 0; std::chrono::steady_clock::now() < deadline; ++round) {
    if (!loop_round(*tier, round)) return 3;
    if (round == 20) write_file(ready, "running");
    if (after_stop < 0 && round > 20 && exists(stop)) after_stop = 0;
    if (after_stop >= 0 && ++after_stop > 20) return 0;
  }
  return after_stop >= 0 ? 0 : 4;
}

int die_holding_lock(const htp::shared_tier_config& c) {
  auto tier = htp::shared_tier::open(c);
  // Maps the segment itself (as a process of this htp would) to lock the robust mutex outside
  // any call, then dies holding it.
  const std::string path = c.shm_dir + "/htp." + c.name;
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return 5;
  void* m = ::mmap(nullptr, sizeof(htp::shared_tier_detail::segment_header), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return 5;
  auto* h = static_cast<htp::shared_tier_detail::segment_header*>(m);
  if (::pthread_mutex_lock(&h->mutex) != 0) return 5;
  ::raise(SIGKILL);
  return 5;
}

int run(int argc, char** argv) {
  if (argc < 4) return 2;
  const std::string mode = argv[1];
  const htp::shared_tier_config c = test_config(argv[2], argv[3]);
  if (mode == "race" && argc == 7) return race(c, argv[4], argv[5], argv[6]);
  if (mode == "loop" && argc == 6) return loop(c, argv[4], argv[5]);
  if (mode == "die_holding_lock") return die_holding_lock(c);
  if (mode == "die_after_open") {
    auto tier = htp::shared_tier::open(c);
    ::raise(SIGKILL);
  }
  if (mode == "die_filling") {
    auto tier = htp::shared_tier::open(c);
    tier->publish({{"f", 4096}}, [](auto&) { ::raise(SIGKILL); });
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shared_tier_child: %s\n", e.what());
    return 5;
  }
}
