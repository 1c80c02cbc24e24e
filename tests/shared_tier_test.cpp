// htp::shared_tier (htp/shared_tier.hpp): a node's host tier in shared memory, shared by several
// processes. The multi-process cases spawn tests/shared_tier_child.cpp (posix_spawn, never a fork
// of this process), bound every wait with a deadline and read the children's results from their
// exit codes and files.
#include "shared_tier/segment.hpp"
#include "shared_tier_common.hpp"
#include "throws_naming.hpp"

#include <htp/error.hpp>
#include <htp/shared_link.hpp>
#include <htp/shared_tier.hpp>
#include <htp/version.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace htp::tier_test;
using htp::test::throws_naming;
namespace fs = std::filesystem;

constexpr auto child_limit = std::chrono::seconds(60);

/// A fresh directory standing for /dev/shm (on /dev/shm when there is one), removed at the end.
class shared_tier_test : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    std::string templ = base + "/htp-tier-test-XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    dir_ = templ;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    name_ = std::string(info->name()) + "." + std::to_string(::getpid());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  htp::shared_tier_config config() const { return test_config(dir_, name_); }
  std::string segment() const { return dir_ + "/htp." + name_; }
  std::string file(const std::string& leaf) const { return dir_ + "/" + leaf; }

  std::string dir_;
  std::string name_;
};

/// Kills and reaps, at the end of a test, the children a failed assertion left running.
class reaper {
 public:
  explicit reaper(const std::vector<pid_t>& kids) : kids_(kids) {}
  ~reaper() {
    for (pid_t pid : kids_) {
      int status = 0;
      if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
    }
  }
  reaper(const reaper&) = delete;
  reaper& operator=(const reaper&) = delete;

 private:
  const std::vector<pid_t>& kids_;
};

pid_t spawn(std::vector<std::string> args, const std::string& out_file = "") {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!out_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
  }
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "posix_spawn " << args[0] << ": " << std::strerror(rc);
  return rc == 0 ? pid : -1;
}

pid_t spawn_child(const std::string& mode, const std::string& dir, const std::string& name,
                  std::vector<std::string> extra = {}) {
  std::vector<std::string> args{HTP_TIER_CHILD, mode, dir, name};
  args.insert(args.end(), extra.begin(), extra.end());
  return spawn(args);
}

/// Waits for `pid` up to the deadline (then kills it); returns its wait status, or -1.
int wait_exit(pid_t pid, std::chrono::steady_clock::duration limit = child_limit) {
  if (pid <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "child " << pid << " did not end within the deadline: killed";
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // polling, not synchronisation
  }
}

bool exited_ok(int status) { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
bool killed(int status) {
  return status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

bool wait_for_file(const std::string& path, pid_t child) {
  const auto deadline = std::chrono::steady_clock::now() + child_limit;
  while (::access(path.c_str(), F_OK) != 0) {
    int status = 0;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (::waitpid(child, &status, WNOHANG) == child) {
      ADD_FAILURE() << "child " << child << " ended (status " << status << ") before " << path;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Waits (bounded) until `n` processes are attached to the tier.
bool wait_until_ranks(const htp::shared_tier& t, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + child_limit;
  while (t.describe().live_ranks != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_F(shared_tier_test, SecondOpenAttachesAndLastCloseUnlinks) {
  auto a = htp::shared_tier::open(config());
  EXPECT_TRUE(a->created());
  EXPECT_TRUE(fs::exists(segment()));
  EXPECT_EQ(a->data_bytes(), config().bytes);
  auto made = a->publish({{"w", 10000}}, fill_entries);
  auto b = htp::shared_tier::open(config());
  EXPECT_FALSE(b->created());
  EXPECT_NE(a->slot(), b->slot());
  const htp::shared_entry seen = b->find("w");
  ASSERT_NE(seen.data, nullptr);
  EXPECT_EQ(seen.bytes, 10000u);
  EXPECT_TRUE(entries_intact({seen}));
  EXPECT_EQ(b->describe().live_ranks, 2u);
  EXPECT_EQ(b->describe().entries, 1u);
  a.reset();
  EXPECT_TRUE(fs::exists(segment()));
  EXPECT_TRUE(entries_intact({seen}));  // b still holds it
  b.reset();
  EXPECT_FALSE(fs::exists(segment()));
}

TEST_F(shared_tier_test, LinksAreOneBudgetForEveryRankAndACloseClearsItsWaits) {
  auto a = htp::shared_tier::open(config());
  auto b = htp::shared_tier::open(config());  // a second rank slot, as another process has
  // 1 kB/s: a drained burst refills in 17 minutes, so no take below races the refill.
  const std::uint64_t rate = 1000, burst = 1 << 20;
  auto la = a->link("h2d", rate, burst);
  auto lb = b->link("h2d", rate, burst);
  htp::shared_link::waiter wa, wb;
  ASSERT_EQ(la->take_or_wait(burst, htp::transfer_priority::prefetch, wa), 0);
  EXPECT_EQ(lb->bytes_taken(), burst);  // one cell: b sees a's bytes
  EXPECT_GT(lb->take_or_wait(burst, htp::transfer_priority::fault, wb), 0);
  EXPECT_EQ(la->waiting(htp::transfer_priority::fault), 1u);
  EXPECT_TRUE(throws_naming([&] { a->link("h2d", rate / 2, burst); }, {"h2d", "500 B/s"}));
  auto other = a->link("d2h", rate, burst);  // another link: another cell
  EXPECT_EQ(other->bytes_taken(), 0u);
  lb.reset();
  b.reset();  // b's process leaves while its fault waits: its waits are cleared
  EXPECT_EQ(la->waiting(htp::transfer_priority::fault), 0u);
}

TEST_F(shared_tier_test, PublishIsAllOrNothing) {
  auto t = htp::shared_tier::open(config());
  t->publish({{"a", 8192}, {"b", 100}}, fill_entries);
  EXPECT_TRUE(throws_naming(
      [&] {
        t->publish({{"a", 8192}, {"c", 10}}, fill_entries);
      },
      {"'c'", "partly"}));
  EXPECT_EQ(t->find("c").data, nullptr);
  EXPECT_TRUE(throws_naming(
      [&] {
        t->publish({{"a", 8192}, {"b", 101}}, fill_entries);
      },
      {"'b'", "100", "101"}));
  EXPECT_TRUE(throws_naming([&] { t->publish({}, fill_entries); }, {"empty batch"}));
  EXPECT_TRUE(throws_naming([&] { t->publish({{"x", 1}, {"x", 1}}, fill_entries); }, {"twice"}));
  EXPECT_TRUE(throws_naming(
      [&] {
        t->publish({{std::string(256, 'n'), 1}}, fill_entries);
      },
      {"255"}));
  EXPECT_TRUE(throws_naming([&] { t->publish({{"z", 0}}, fill_entries); }, {"'z'", "0 bytes"}));
  // A fill that throws leaves nothing, and the names can be published again.
  EXPECT_THROW(t->publish({{"d", 10}, {"e", 10}}, [](auto&) { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(t->find("d").data, nullptr);
  EXPECT_EQ(t->describe().entries, 2u);
  // Too large: out_of_memory naming the used and free bytes, nothing reserved.
  EXPECT_TRUE(throws_naming<htp::out_of_memory>(
      [&] {
        t->publish({{"f", 1 << 20}, {"g", 4 << 20}}, fill_entries);
      },
      {"used", "free", "largest free extent"}));
  EXPECT_EQ(t->find("f").data, nullptr);
  EXPECT_EQ(t->describe().entries, 2u);
  auto de = t->publish({{"d", 10}, {"e", 10}}, fill_entries);
  EXPECT_TRUE(entries_intact(de));
}

TEST_F(shared_tier_test, ReleaseFreesEntriesNoProcessHolds) {
  auto a = htp::shared_tier::open(config());
  auto b = htp::shared_tier::open(config());
  // The whole data area in one entry: it fits again only once it is freed.
  const std::size_t all = a->data_bytes();
  a->publish({{"big", all}}, fill_entries);
  ASSERT_NE(b->find("big").data, nullptr);
  a->release("big");
  EXPECT_TRUE(throws_naming([&] { a->release("big"); }, {"'big'", "does not hold"}));
  EXPECT_TRUE(throws_naming<htp::out_of_memory>(
      [&] {
        a->publish({{"other", 4096}}, {});
      },
      {"free 0"}));
  b->release("big");
  EXPECT_EQ(a->find("big").data, nullptr);
  auto again = a->publish({{"other", all}}, fill_entries);
  EXPECT_TRUE(entries_intact(again));
}

TEST_F(shared_tier_test, ThreadsOfOneProcessFillOnce) {
  auto t = htp::shared_tier::open(config());
  std::atomic<int> fills{0};
  auto work = [&] {
    auto got = t->publish(race_batch(), [&](auto& entries) {
      ++fills;
      fill_entries(entries);
    });
    return entries_intact(got);
  };
  std::vector<std::future<bool>> f;
  for (int i = 0; i < 4; ++i) f.push_back(std::async(std::launch::async, work));
  for (auto& x : f) EXPECT_TRUE(x.get());
  EXPECT_EQ(fills.load(), 1);
}

TEST_F(shared_tier_test, RacingProcessesFillOnceAndSeeTheSameBytes) {
  auto parent = htp::shared_tier::open(config());
  std::vector<pid_t> kids;
  const reaper reap(kids);
  for (int i = 0; i < 4; ++i) {
    kids.push_back(
        spawn_child("race", dir_, name_, {file("go"), file("r" + std::to_string(i)), file("end")}));
  }
  // The children race once all have attached (they attach, then wait for the go file), and hold
  // the batch until the end file: then the batch is published once however they interleave.
  ASSERT_TRUE(wait_until_ranks(*parent, 5));
  write_file(file("go"), "go");
  int fills = 0;
  std::string checksum;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(wait_for_file(file("r" + std::to_string(i)), kids[i])) << "child " << i;
    std::istringstream r(read_file(file("r" + std::to_string(i))));
    int filled = -1;
    std::string sum;
    r >> filled >> sum;
    fills += filled;
    if (i == 0) checksum = sum;
    EXPECT_EQ(sum, checksum) << "child " << i;
  }
  EXPECT_EQ(fills, 1);
  auto mine = parent->publish(race_batch(), [](auto&) { FAIL() << "filled twice"; });
  EXPECT_EQ(std::to_string(batch_checksum(mine)), checksum);
  write_file(file("end"), "end");
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(exited_ok(wait_exit(kids[i]))) << "child " << i;
}

TEST_F(shared_tier_test, KilledRankLeavesTheOthersIntact) {
  auto parent = htp::shared_tier::open(config());
  std::vector<pid_t> kids;
  const reaper reap(kids);
  for (int i = 0; i < 4; ++i) {
    kids.push_back(
        spawn_child("loop", dir_, name_, {file("ready" + std::to_string(i)), file("stop")}));
  }
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(wait_for_file(file("ready" + std::to_string(i)), kids[i]));
  ::kill(kids[0], SIGKILL);
  EXPECT_TRUE(killed(wait_exit(kids[0])));
  write_file(file("stop"), "stop");
  for (int i = 1; i < 4; ++i) EXPECT_TRUE(exited_ok(wait_exit(kids[i]))) << "child " << i;
  const htp::shared_tier_listing l = parent->describe();
  EXPECT_EQ(l.dead_ranks, 0u);
  EXPECT_EQ(l.live_ranks, 1u);
  EXPECT_EQ(l.entries, 0u) << "the dead rank's holds were not dropped";
}

TEST_F(shared_tier_test, RankKilledHoldingTheLockBlocksNoOne) {
  auto parent = htp::shared_tier::open(config());
  EXPECT_TRUE(killed(wait_exit(spawn_child("die_holding_lock", dir_, name_))));
  auto got = parent->publish({{"after", 4096}}, fill_entries);  // takes the dead owner's lock
  EXPECT_TRUE(entries_intact(got));
  const htp::shared_tier_listing l = parent->describe();
  EXPECT_EQ(l.dead_ranks, 0u);
  EXPECT_EQ(l.live_ranks, 1u);
}

TEST_F(shared_tier_test, DeadFillerIsReplacedByAWaiter) {
  auto parent = htp::shared_tier::open(config());
  EXPECT_TRUE(killed(wait_exit(spawn_child("die_filling", dir_, name_))));
  int fills = 0;
  auto got = parent->publish({{"f", 4096}}, [&](auto& e) {
    ++fills;
    fill_entries(e);
  });
  EXPECT_EQ(fills, 1);
  EXPECT_TRUE(entries_intact(got));
  EXPECT_EQ(parent->describe().dead_ranks, 0u);
}

TEST_F(shared_tier_test, StaleTierIsListedRemadeAndRemoved) {
  EXPECT_TRUE(killed(wait_exit(spawn_child("die_after_open", dir_, name_))));
  auto listed = htp::list_shared_tiers(dir_);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, name_);
  EXPECT_TRUE(listed[0].stale);
  EXPECT_EQ(listed[0].dead_ranks, 1u);
  EXPECT_EQ(listed[0].problem, "");
  {
    auto t = htp::shared_tier::open(config());  // the next open remakes it
    EXPECT_TRUE(t->created());
    EXPECT_EQ(t->describe().dead_ranks, 0u);
    EXPECT_TRUE(throws_naming<htp::logic_error>(
        [&] { htp::remove_shared_tier(name_, false, dir_); }, {"1 live process"}));
  }
  EXPECT_FALSE(fs::exists(segment()));
  EXPECT_FALSE(htp::remove_shared_tier(name_, false, dir_));
  EXPECT_TRUE(killed(wait_exit(spawn_child("die_after_open", dir_, name_))));
  EXPECT_TRUE(htp::remove_shared_tier(name_, false, dir_));
  EXPECT_FALSE(fs::exists(segment()));
  // force removes a live one; the process keeps its mapping.
  auto live = htp::shared_tier::open(config());
  auto e = live->publish({{"kept", 100}}, fill_entries);
  EXPECT_TRUE(htp::remove_shared_tier(name_, true, dir_));
  EXPECT_TRUE(entries_intact(e));
  // A new tier of that name is not unlinked when the removed one's last process closes.
  auto next = htp::shared_tier::open(config());
  EXPECT_TRUE(next->created());
  live.reset();
  EXPECT_TRUE(fs::exists(segment()));
  next.reset();
  EXPECT_FALSE(fs::exists(segment()));
  EXPECT_TRUE(throws_naming([&] { htp::remove_shared_tier("bad/name", false, dir_); }, {"'"}));
}

TEST_F(shared_tier_test, OtherConfigOrVersionIsRefusedNamingBoth) {
  auto a = htp::shared_tier::open(config());
  htp::shared_tier_config other = config();
  other.page_bytes = 8192;
  EXPECT_TRUE(throws_naming([&] { htp::shared_tier::open(other); }, {"page 4 KiB", "page 8 KiB"}));
  other = config();
  other.bytes *= 2;
  EXPECT_TRUE(throws_naming([&] { htp::shared_tier::open(other); }, {"4194304", "8388608"}));
  a.reset();
  // A segment of another htp version (its header written by hand).
  {
    htp::shared_tier_detail::segment_header h{};
    std::memcpy(h.magic, htp::shared_tier_detail::segment_magic, sizeof h.magic);
    std::snprintf(h.version, sizeof h.version, "0.0.1");
    h.layout = 99;
    h.page_bytes = 4096;
    std::ofstream(segment(), std::ios::binary).write(reinterpret_cast<const char*>(&h), sizeof h);
  }
  EXPECT_TRUE(
      throws_naming([&] { htp::shared_tier::open(config()); },
                    {"htp 0.0.1 (layout 99", "htp " HTP_VERSION_STRING, "htp-tier remove"}));
  auto listed = htp::list_shared_tiers(dir_);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_NE(listed[0].problem.find("0.0.1"), std::string::npos);
  EXPECT_TRUE(throws_naming<htp::logic_error>([&] { htp::remove_shared_tier(name_, false, dir_); },
                                              {"--force"}));
  // Not a tier at all.
  std::ofstream(segment(), std::ios::binary | std::ios::trunc) << std::string(70000, 'x');
  EXPECT_TRUE(throws_naming([&] { htp::shared_tier::open(config()); }, {"not an htp shared tier"}));
  EXPECT_TRUE(fs::exists(segment()));  // someone else's file is left alone
}

TEST_F(shared_tier_test, PreflightRefusesWhatShmCannotHold) {
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(dir_.c_str(), &vfs), 0);
  htp::shared_tier_config c = config();
  c.bytes = 2 * static_cast<std::size_t>(vfs.f_bavail) * vfs.f_frsize;
  EXPECT_TRUE(throws_naming<htp::out_of_memory>([&] { htp::shared_tier::open(c); },
                                                {"--shm-size", "remount,size="}));
  EXPECT_FALSE(fs::exists(segment()));
}

TEST_F(shared_tier_test, PreflightRefusesMoreThanTheMemlockLimit) {
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &old), 0);
  struct rlimit low = old;
  low.rlim_cur = 64 << 10;
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < low.rlim_cur) low.rlim_cur = old.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_MEMLOCK, &low), 0);
  htp::shared_tier_config c = config();
  c.lock_in_memory = true;
  const bool refused =
      throws_naming<htp::out_of_memory>([&] { htp::shared_tier::open(c); }, {"ulimit -l"});
  ::setrlimit(RLIMIT_MEMLOCK, &old);
  EXPECT_TRUE(refused);
  EXPECT_FALSE(fs::exists(segment()));
}

TEST_F(shared_tier_test, BadConfigsAreRefused) {
  htp::shared_tier_config c = config();
  c.name = "a/b";
  EXPECT_TRUE(throws_naming([&] { htp::shared_tier::open(c); }, {"'a/b'", "letters"}));
  c = config();
  c.page_bytes = 3000;
  EXPECT_TRUE(throws_naming([&] { htp::shared_tier::open(c); }, {"3000", "power of two"}));
  c = config();
  c.bytes = 0;
  EXPECT_TRUE(throws_naming([&] { htp::shared_tier::open(c); }, {"bytes"}));
}

#ifdef HTP_TIER_CLI
TEST_F(shared_tier_test, CliListsAndRemovesStaleTiers) {
  EXPECT_TRUE(killed(wait_exit(spawn_child("die_after_open", dir_, name_))));
  EXPECT_TRUE(exited_ok(wait_exit(spawn({HTP_TIER_CLI, "list", "--shm-dir", dir_}, file("out")))));
  const std::string listed = read_file(file("out"));
  EXPECT_NE(listed.find(name_), std::string::npos) << listed;
  EXPECT_NE(listed.find("stale"), std::string::npos) << listed;
  auto live = htp::shared_tier::open(test_config(dir_, name_ + "live"));
  const int refused = wait_exit(spawn({HTP_TIER_CLI, "remove", name_ + "live", "--shm-dir", dir_}));
  EXPECT_TRUE(WIFEXITED(refused) && WEXITSTATUS(refused) == 1);
  EXPECT_TRUE(exited_ok(
      wait_exit(spawn({HTP_TIER_CLI, "remove", "--stale", "--shm-dir", dir_}, file("out2")))));
  EXPECT_NE(read_file(file("out2")).find("1 stale tier(s) removed"), std::string::npos);
  EXPECT_FALSE(fs::exists(segment()));
  EXPECT_TRUE(fs::exists(dir_ + "/htp." + name_ + "live"));
}
#endif

}  // namespace
