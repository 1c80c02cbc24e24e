#include "sim/sim_graph.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

namespace htp::sim {

namespace {

/// A task that sets `sig` when its stream reaches it, at that modelled time (an event record).
std::function<void()> mark(std::shared_ptr<signal> sig) {
  return [sig = std::move(sig)] {
    const auto at = current_task_ready_time();
    sig->set(at);
    set_current_task_completion(at);
  };
}

/// A task that waits for every signal in `sigs`; the stream goes on at the later of reaching it
/// and the latest signal's modelled time (an event wait).
std::function<void()> wait_all(std::vector<std::shared_ptr<signal>> sigs) {
  return [sigs = std::move(sigs)] {
    auto at = current_task_ready_time();
    for (const auto& s : sigs) {
      s->wait();
      at = std::max(at, *s->set_at());
    }
    set_current_task_completion(at);
  };
}

void merge_into(dep_set& into, const dep_set& more) {
  dep_set merged;
  std::set_union(into.begin(), into.end(), more.begin(), more.end(), std::back_inserter(merged));
  into = std::move(merged);
}

}  // namespace

capture::lane* capture::find(stream* s) {
  for (auto& l : lanes_)
    if (l.s == s) return &l;
  return nullptr;
}

const capture::lane* capture::find(stream* s) const {
  for (const auto& l : lanes_)
    if (l.s == s) return &l;
  return nullptr;
}

void capture::add(stream* s, std::function<void()> task) {
  lane* l = find(s);
  const std::size_t index = nodes_.size();
  nodes_.push_back({std::move(task), l->next, static_cast<std::size_t>(l - lanes_.data())});
  l->next = {index};
}

dep_set capture::point_of(stream* s) const { return find(s)->next; }

void capture::join(stream* s, const dep_set& point) {
  if (lane* l = find(s)) {
    merge_into(l->next, point);
    return;
  }
  lanes_.push_back({s, point});
}

std::vector<stream*> capture::streams() const {
  std::vector<stream*> out;
  for (const auto& l : lanes_) out.push_back(l.s);
  return out;
}

std::string capture::unjoined() const {
  // The origin's next node and everything it depends on, directly or not.
  std::vector<bool> reached(nodes_.size(), false);
  std::vector<std::size_t> todo = lanes_[0].next;
  while (!todo.empty()) {
    const std::size_t n = todo.back();
    todo.pop_back();
    if (reached[n]) continue;
    reached[n] = true;
    for (std::size_t d : nodes_[n].deps) todo.push_back(d);
  }
  for (std::size_t i = 1; i < lanes_.size(); ++i) {
    for (std::size_t n : lanes_[i].next) {
      if (!reached[n]) {
        return "joined stream " + std::to_string(i) +
               " (in the order streams joined) has captured work the origin stream never waited "
               "for: record an event on it after its last work and make the origin wait on it";
      }
    }
  }
  return {};
}

graph::graph(std::vector<node> nodes, std::size_t lanes, error_sink& errors)
    : nodes_(std::move(nodes)) {
  std::vector<std::vector<std::size_t>> by_lane(lanes);
  for (std::size_t n = 0; n < nodes_.size(); ++n) by_lane[nodes_[n].lane].push_back(n);
  for (auto& l : by_lane) {
    if (l.empty()) continue;  // a stream that joined and only waited runs nothing
    lane_nodes_.push_back(std::move(l));
    lanes_.push_back(std::make_unique<stream>(errors));
  }
}

graph::~graph() {
  lanes_.clear();  // each drains its queued replays, then joins its worker
}

void graph::launch(stream& s) {
  std::lock_guard lock(launch_mutex_);
  // The launch point: where `s` is now. With the previous replay's ends, what every lane waits
  // for first, so replays of one graph never overlap.
  auto start = std::make_shared<signal>();
  s.enqueue(mark(start));
  std::vector<std::shared_ptr<signal>> first = last_ends_;
  first.push_back(start);
  std::vector<std::shared_ptr<signal>> done(nodes_.size());
  for (auto& d : done) d = std::make_shared<signal>();
  std::vector<std::shared_ptr<signal>> ends;
  for (std::size_t l = 0; l < lanes_.size(); ++l) {
    stream& lane = *lanes_[l];
    lane.enqueue(wait_all(first));
    for (std::size_t n : lane_nodes_[l]) {
      std::vector<std::shared_ptr<signal>> deps;
      for (std::size_t d : nodes_[n].deps) deps.push_back(done[d]);
      if (!deps.empty()) lane.enqueue(wait_all(std::move(deps)));
      lane.enqueue([this, n] { nodes_[n].task(); });
      lane.enqueue(mark(done[n]));
    }
    ends.push_back(done[lane_nodes_[l].back()]);
  }
  if (!ends.empty()) s.enqueue(wait_all(ends));
  last_ends_ = std::move(ends);
}

}  // namespace htp::sim
