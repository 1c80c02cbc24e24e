// A GoogleTest predicate for error messages: the call throws htp::invalid_argument (or the htp
// type E given) and its what() names every needle (the value and the rule, the path and the
// reason), as htp promises for every error.
#pragma once

#include <htp/error.hpp>

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

namespace htp::test {

template <typename E = htp::invalid_argument, typename F>
::testing::AssertionResult throws_naming(F f, std::initializer_list<const char*> needles) {
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const char* n : needles) {
      if (msg.find(n) == std::string::npos) {
        return ::testing::AssertionFailure() << "message lacks '" << n << "': " << msg;
      }
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "the expected htp error type was not thrown";
}

}  // namespace htp::test
