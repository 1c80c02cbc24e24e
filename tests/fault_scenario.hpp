// A fixed pager scenario run on a fault-injecting device, checking the strong guarantee after every
// injected failure: the failing call throws a typed error (htp::out_of_memory or htp::cuda_error)
// or completes; every live tensor's bytes still match their checksum (verified with injection off);
// the pager stays usable; and at teardown every byte allocated from the device came back.
#pragma once

#include "pager_fixture.hpp"

#include <htp/fault_injecting_device.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace htp::test {

/// What one run of the scenario saw.
struct scenario_result {
  int failures = 0;                 ///< typed errors thrown by pager calls (each one checked).
  bool constructed = false;         ///< the pager's constructor succeeded.
  std::vector<std::string> errors;  ///< messages of the failures (for diagnostics).
};

/// One registered tensor and the checksum its bytes must have.
struct scenario_tensor {
  tensor_handle h;
  std::size_t bytes = 0;
  tensor_kind kind = tensor_kind::weight;
  std::uint64_t sum = 0;
};

/// Runs the scenario on `fdev` (wrapping `inner`) under `plan`. After each failure the plan is
/// disarmed for the checks, then re-armed with `rearm` (nullopt: stays disarmed). Uses gtest
/// assertions; check HasFatalFailure() after it returns.
class fault_scenario {
 public:
  fault_scenario(device& inner, fault_injecting_device& fdev, bool checked)
      : inner_(inner), fdev_(fdev), checked_(checked) {}

  scenario_result run(const fault_plan& plan, std::optional<fault_plan> rearm);

 private:
  void step(pager& p, const std::function<void()>& op, const char* what);
  void recover_and_verify(pager& p);
  void verify_all(pager& p);
  void acquire_read(pager& p, std::size_t i);
  void acquire_write(pager& p, std::size_t i, std::uint64_t seed);
  void register_one(pager& p, std::size_t bytes, tensor_kind kind, std::uint64_t seed);

  device& inner_;
  fault_injecting_device& fdev_;
  bool checked_;
  std::optional<fault_plan> rearm_;
  scenario_result result_;
  std::vector<scenario_tensor> live_;
  /// Acquires not yet released: (index into live_, dirty-on-release, checksum after the write).
  struct hold {
    std::size_t i;
    bool dirty;
    std::uint64_t new_sum;
  };
  std::vector<hold> held_;
  std::optional<stream> compute_;
  std::uint64_t* slot_ = nullptr;
};

}  // namespace htp::test
