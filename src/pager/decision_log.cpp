// The decision log (decision_log.hpp).
#include "pager/decision_log.hpp"

#include "log.hpp"
#include "pager/tensor_table.hpp"

#include <atomic>
#include <cstdlib>
#include <fstream>

namespace htp::detail {

namespace {
std::atomic<unsigned> pagers{0};
}  // namespace

decision_log::decision_log() {
  const char* p = std::getenv("HTP_DECISION_LOG");
  if (p == nullptr || *p == '\0') return;
  path_ = p;
  prefix_ = "p" + std::to_string(pagers.fetch_add(1)) + " ";
}

decision_log::~decision_log() {
  if (!on() || lines_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  out << lines_;
  if (!out) logger().error("pager: cannot append the decision log to '{}'", path_);
}

void decision_log::line(const char* what, const std::string& name) {
  lines_ += prefix_;
  lines_ += what;
  lines_ += ' ';
  lines_ += name;
  lines_ += '\n';
}

void decision_log::load_started(const tensor_record& t, transfer_priority priority) {
  line(priority == transfer_priority::fault ? "load fault" : "load prefetch", t.name);
}

void decision_log::evicted(const tensor_record& t, eviction how, cause) {
  if (how == eviction::write_back) line("write-back", t.name);
  line(how == eviction::load_in_flight ? "evict loading" : "evict", t.name);
}

void decision_log::move_started(const tensor_record& t) { line("move", t.name); }

}  // namespace htp::detail
