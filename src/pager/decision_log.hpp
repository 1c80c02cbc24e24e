// The pager's decision log: every load (and why: a fault or a prefetch), eviction, write-back and
// compaction move, by tensor name, in the order the pager decided them. A debugging aid and the
// yardstick of "no behaviour change": two builds that make the same choices write the same log.
// Turned on by the environment, so that any program (a test, a bench, a Python script) can write
// one without being changed: HTP_DECISION_LOG=<path> appends each pager's log to <path> when the
// pager is destroyed, one line per decision, each line starting with the pager's number in the
// process ("p3 load fault layer.7.w"). An observer (observer.hpp): when the variable is unset the
// pager does not add it to its observers, and it costs nothing. Not thread-safe: the pager's
// mutex guards it.
#pragma once

#include "pager/observer.hpp"

#include <string>

namespace htp::detail {

class decision_log final : public pager_observer {
 public:
  /// Reads HTP_DECISION_LOG; on when it names a path.
  decision_log();
  /// Appends this pager's lines to the path (best effort: a write failure is logged, not thrown).
  ~decision_log() override;
  decision_log(const decision_log&) = delete;
  decision_log& operator=(const decision_log&) = delete;

  /// True when HTP_DECISION_LOG named a path (the pager then adds it to its observers).
  bool on() const noexcept { return !path_.empty(); }
  void load_started(const tensor_record& t, transfer_priority priority) override;
  void evicted(const tensor_record& t, eviction how, cause why) override;
  void move_started(const tensor_record& t) override;

 private:
  void line(const char* what, const std::string& name);
  std::string path_;
  std::string prefix_;  // "p<k> "
  std::string lines_;
};

}  // namespace htp::detail
