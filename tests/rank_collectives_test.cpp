// Sim collectives with one rank per process (make_sim_rank_collectives): N processes of
// rank_collectives_child (started with posix_spawn, never a fork of this process) join a world
// and check every result exactly; a world-size mismatch, a rank killed mid-loop (the others must
// report its death long before the rendezvous timeout) and a rank that never joins are named;
// the segment is gone afterwards. Every wait on a child has a deadline (then the child is killed
// and the test fails). The one-process world runs in this process.
#include <htp/collectives.hpp>
#include <htp/error.hpp>
#include <htp/sim_device.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace htp::test {
namespace {

using clock_type = std::chrono::steady_clock;

/// A world's name, unique per test and process.
std::string world_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string("t") + std::to_string(getpid()) + "-" + info->name();
}
std::string segment_path(const std::string& name) { return "/dev/shm/htp-coll." + name; }
bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

/// The children of one test: each one's output goes to a file; fd 3 of each is the write end of
/// one pipe, where a child writes its rank once it runs.
class children {
 public:
  children() {
    int p[2];
    if (pipe(p) != 0) throw std::runtime_error("pipe failed");
    // Away from fd 3, so that the child's dup2 to 3 always clears close-on-exec.
    read_ = fcntl(p[0], F_DUPFD_CLOEXEC, 10);
    write_ = fcntl(p[1], F_DUPFD_CLOEXEC, 10);
    close(p[0]);
    close(p[1]);
    fcntl(read_, F_SETFL, O_NONBLOCK);
  }
  ~children() {
    for (pid_t pid : pids_) {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    close(read_);
    close(write_);
  }
  children(const children&) = delete;
  children& operator=(const children&) = delete;

  /// Starts rank `rank` of `world`; returns its index here.
  std::size_t spawn(const std::string& name, std::size_t rank, std::size_t world, long timeout_ms,
                    std::size_t iterations) {
    const std::size_t index = pids_.size();
    outs_.push_back(::testing::TempDir() + name + "." + std::to_string(index) + ".out");
    std::vector<std::string> args = {HTP_RANK_COLLECTIVES_CHILD, name,
                                     std::to_string(rank),       std::to_string(world),
                                     std::to_string(timeout_ms), std::to_string(iterations)};
    std::vector<std::string> env = {"HTP_SIM_RANK_STAGING_BYTES=65536"};
    for (char** e = environ; *e; ++e) {
      if (std::strncmp(*e, "HTP_SIM_RANK_STAGING_BYTES=", 27) != 0) env.emplace_back(*e);
    }
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    for (auto& e : env) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, outs_.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_adddup2(&fa, write_, 3);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
    pids_.push_back(pid);
    return index;
  }

  /// Waits until `n` children have said they run; false at the deadline.
  bool wait_running(std::size_t n, clock_type::time_point deadline) {
    std::size_t seen = 0;
    while (seen < n && clock_type::now() < deadline) {
      unsigned char b[16];
      const ssize_t got = read(read_, b, sizeof b);
      if (got > 0) {
        seen += static_cast<std::size_t>(got);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return seen >= n;
  }

  /// Child `i`'s exit code; -1 (the child killed) if it did not exit by the deadline, or the
  /// negated signal that ended it.
  int wait(std::size_t i, clock_type::time_point deadline) {
    int status = 0;
    for (;;) {
      const pid_t got = waitpid(pids_[i], &status, WNOHANG);
      if (got == pids_[i]) break;
      if (clock_type::now() >= deadline) {
        kill(pids_[i], SIGKILL);
        waitpid(pids_[i], &status, 0);
        pids_[i] = -1;
        ADD_FAILURE() << "child " << i << " did not exit by the deadline; its output:\n"
                      << output(i);
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    pids_[i] = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

  void kill_child(std::size_t i) { kill(pids_[i], SIGKILL); }

  std::string output(std::size_t i) const {
    std::ifstream in(outs_[i]);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  int read_ = -1, write_ = -1;
  std::vector<pid_t> pids_;
  std::vector<std::string> outs_;
};

clock_type::time_point in_seconds(int s) { return clock_type::now() + std::chrono::seconds(s); }

TEST(rank_collectives, four_processes_gather_and_reduce_exactly_then_remove_the_segment) {
  const std::string name = world_name();
  children ch;
  for (std::size_t r = 0; r < 4; ++r) ch.spawn(name, r, 4, 60'000, 10);
  const auto deadline = in_seconds(60);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(ch.wait(r, deadline), 0) << ch.output(r);
  EXPECT_FALSE(exists(segment_path(name))) << "the last rank to leave removes the segment";
}

TEST(rank_collectives, a_segment_of_another_world_size_is_refused_naming_both) {
  const std::string name = world_name();
  children ch;
  ch.spawn(name, 0, 2, 2'000, 1);
  const auto made = in_seconds(30);
  while (!exists(segment_path(name)) && clock_type::now() < made)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(exists(segment_path(name))) << "rank 0 did not make the segment";
  ch.spawn(name, 1, 3, 2'000, 1);
  EXPECT_EQ(ch.wait(1, in_seconds(30)), 4);
  const std::string out = ch.output(1);
  EXPECT_NE(out.find("world of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("world of 3"), std::string::npos) << out;
  // Rank 0 gives up on rank 1 after its 2 s timeout, naming it.
  EXPECT_EQ(ch.wait(0, in_seconds(30)), 4);
  EXPECT_NE(ch.output(0).find("rank(s) 1 of 2"), std::string::npos) << ch.output(0);
  EXPECT_FALSE(exists(segment_path(name)));
}

TEST(rank_collectives, a_rank_killed_mid_loop_aborts_the_others_long_before_the_timeout) {
  const std::string name = world_name();
  children ch;
  for (std::size_t r = 0; r < 4; ++r) ch.spawn(name, r, 4, 60'000, 1'000'000);
  ASSERT_TRUE(ch.wait_running(4, in_seconds(60))) << ch.output(0);
  ch.kill_child(2);
  // The timeout is 60 s; the death must be noticed in well under 20.
  const auto deadline = in_seconds(20);
  for (std::size_t r : {0, 1, 3}) {
    EXPECT_EQ(ch.wait(r, deadline), 3) << ch.output(r);
    EXPECT_NE(ch.output(r).find("rank 2 (pid "), std::string::npos) << ch.output(r);
    EXPECT_NE(ch.output(r).find("died during"), std::string::npos) << ch.output(r);
  }
  EXPECT_EQ(ch.wait(2, in_seconds(10)), -SIGKILL);
  EXPECT_FALSE(exists(segment_path(name))) << "the last live rank removes the segment";
}

TEST(rank_collectives, a_rank_that_never_joins_is_named_after_the_timeout) {
  const std::string name = world_name();
  children ch;
  for (std::size_t r = 0; r < 3; ++r) ch.spawn(name, r, 4, 1'500, 1);
  const auto deadline = in_seconds(30);
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(ch.wait(r, deadline), 4) << ch.output(r);
    EXPECT_NE(ch.output(r).find("rank(s) 3 of 4"), std::string::npos) << ch.output(r);
  }
  EXPECT_FALSE(exists(segment_path(name)));
}

TEST(rank_collectives, a_world_of_one_in_this_process_copies_checks_ranks_and_aborts) {
  const std::string name = world_name();
  auto dev = make_sim_device();
  stream s(*dev);
  {
    auto c = make_sim_rank_collectives(name, 0, 1, *dev, std::chrono::seconds(10));
    EXPECT_EQ(c->size(), 1u);
    EXPECT_EQ(c->backend_name(), "sim");
    EXPECT_TRUE(exists(segment_path(name)));
    std::vector<float> send = {1.5f, -2.0f}, recv(2);
    c->all_reduce_sum(0, send.data(), recv.data(), 2, element_type::float32, s);
    s.synchronize();
    EXPECT_EQ(recv, send);
    EXPECT_THROW(c->all_gather(1, send.data(), recv.data(), 4, s), invalid_argument);
    EXPECT_THROW(c->all_gather(0, nullptr, recv.data(), 4, s), invalid_argument);
    c->abort("the test's reason");
    EXPECT_TRUE(c->aborted());
    try {
      c->all_gather(0, send.data(), recv.data(), 4, s);
      ADD_FAILURE() << "a call after abort() was accepted";
    } catch (const logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("the test's reason"), std::string::npos) << e.what();
    }
    EXPECT_THROW(c->group_start(), logic_error);
  }
  EXPECT_FALSE(exists(segment_path(name)));
  EXPECT_THROW(make_sim_rank_collectives("", 0, 1, *dev), invalid_argument);
  EXPECT_THROW(make_sim_rank_collectives("a/b", 0, 1, *dev), invalid_argument);
  EXPECT_THROW(make_sim_rank_collectives(name, 1, 1, *dev), invalid_argument);
  EXPECT_THROW(make_sim_rank_collectives(name, 0, 0, *dev), invalid_argument);
  EXPECT_THROW(make_sim_rank_collectives(name, 0, 1, *dev, std::chrono::milliseconds(0)),
               invalid_argument);
}

// Two ranks in this process (threads stand in for processes): calls that differ abort the world
// with a reason naming both.
TEST(rank_collectives, ranks_making_different_calls_abort_the_world_naming_both) {
  const std::string name = world_name();
  std::vector<std::unique_ptr<device>> devs;
  for (int r = 0; r < 2; ++r) devs.push_back(make_sim_device());
  std::vector<std::unique_ptr<collectives>> c(2);
  std::vector<std::thread> join;
  for (std::size_t r = 0; r < 2; ++r) {
    join.emplace_back([&, r] {
      c[r] = make_sim_rank_collectives(name, r, 2, *devs[r], std::chrono::seconds(30));
    });
  }
  for (auto& t : join) t.join();
  ASSERT_TRUE(c[0] && c[1]);
  stream s0(*devs[0]), s1(*devs[1]);
  std::vector<float> a(16, 1.0f), b(32, 0.0f);
  c[0]->all_gather(0, a.data(), b.data(), 64, s0);
  c[1]->all_reduce_sum(1, a.data(), a.data(), 16, element_type::float32, s1);
  s0.synchronize();
  s1.synchronize();
  EXPECT_TRUE(c[0]->aborted());
  EXPECT_TRUE(c[1]->aborted());
  try {
    c[1]->all_gather(1, a.data(), b.data(), 64, s1);
    ADD_FAILURE() << "a call after the abort was accepted";
  } catch (const logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("an all_gather of 64 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("a float32 all_reduce_sum of 64 bytes"), std::string::npos) << what;
  }
  c.clear();
  EXPECT_FALSE(exists(segment_path(name)));
}

}  // namespace
}  // namespace htp::test
