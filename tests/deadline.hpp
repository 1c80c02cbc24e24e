// Deadlines for the tests' waits. A test that waits for something the library must do (a count to
// move, a thread to return) waits at most hang_limit, then fails naming what it waited for; it
// never sleeps to let something happen and never measures how long the wait took. The limit only
// turns a hang into a failure: it is far beyond what any wait takes, even under the sanitizers.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <utility>

namespace htp::test {

/// How long a wait may take before the test calls it a hang.
inline constexpr std::chrono::seconds hang_limit{60};

/// Polls `done` (yielding between polls) until it returns true, for at most `limit`. Use as
/// `ASSERT_TRUE(wait_until(pred, "what"))`; on a timeout the failure reads "<what>: not so after
/// 60 s (a hang)". Callable from any thread (EXPECT_TRUE there).
template <class Pred>
::testing::AssertionResult wait_until(Pred&& done, const std::string& what,
                                      std::chrono::steady_clock::duration limit = hang_limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline && !done()) {
      return ::testing::AssertionFailure()
             << what << ": not so after "
             << std::chrono::duration_cast<std::chrono::seconds>(limit).count() << " s (a hang)";
    }
    std::this_thread::yield();
  }
  return ::testing::AssertionSuccess();
}

/// wait_until for a wait whose timeout leaves a thread that can never be joined (the test could
/// not end): reports the failure, then ends the process.
template <class Pred>
void wait_until_or_die(Pred&& done, const std::string& what,
                       std::chrono::steady_clock::duration limit = hang_limit) {
  const ::testing::AssertionResult r = wait_until(std::forward<Pred>(done), what, limit);
  if (!r) {
    ADD_FAILURE() << r.message();
    std::abort();
  }
}

/// Waits at most hang_limit for work another thread runs (`f`, from std::async) and returns its
/// result, or rethrows what it threw. Work that never ends is a hang, reported and ended: its
/// thread cannot be joined, and the future's destructor would wait for it.
template <class T>
T get_or_die(std::future<T>& f, const std::string& what) {
  if (f.wait_for(hang_limit) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not return within " << hang_limit.count() << " s (a hang)";
    std::abort();
  }
  return f.get();
}

/// Runs `f` on another thread and waits for it as get_or_die does.
template <class F>
void returns_or_die(F&& f, const std::string& what) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  get_or_die(done, what);
}

}  // namespace htp::test
