// A GoogleTest predicate for error messages: the call throws htp::invalid_argument and its what()
// names every needle (the value and the rule), as htp promises for bad input.
#pragma once

#include <htp/error.hpp>

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

namespace htp::test {

template <typename F>
::testing::AssertionResult throws_naming(F f, std::initializer_list<const char*> needles) {
  try {
    f();
  } catch (const htp::invalid_argument& e) {
    const std::string msg = e.what();
    for (const char* n : needles) {
      if (msg.find(n) == std::string::npos) {
        return ::testing::AssertionFailure() << "message lacks '" << n << "': " << msg;
      }
    }
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no htp::invalid_argument thrown";
}

}  // namespace htp::test
