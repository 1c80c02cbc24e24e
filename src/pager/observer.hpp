// What the pager's components tell the ones that watch them. The tensor table reports each
// transition of a tensor once, where it happens (a load started, a tensor evicted and why, a copy
// finished); the room maker and the prefetcher report the decisions that change no tensor (a rung
// of the out-of-memory ladder waited, a prefetch skipped); the pager reports each call once, when
// it ends (an acquire's outcomes). Observers only watch: the statistics (pager_stats.hpp), the
// decision log (decision_log.hpp). No policy reads them back, and none is told twice or told to
// take something back. Every method runs under the pager's mutex; the default does nothing.
#pragma once

#include <htp/transfer_engine.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace htp::detail {

struct tensor_record;

/// How one element of an acquire ended.
enum class acquire_outcome {
  hit,
  prefetch_hit,
  late_prefetch,
  fault,
  degraded,      // shares a degraded (zero-copy) acquire already in place
  degraded_oom,  // the ladder's rung 5 served it zero-copy
  fresh,         // a dead activation given HBM with nothing copied in
};

/// Why a tensor left HBM or a compaction ran: for a demand of the out-of-memory ladder (its rungs
/// are counted), for a prefetch (the eviction the later fault would have made), or asked for
/// (pager::evict, pager::compact, automatic compaction).
enum class cause { demand, prefetch, request };

/// How a tensor left HBM.
enum class eviction { clean, load_in_flight, write_back };

/// One element of an acquire call that succeeded, as the observers see it.
struct acquired_element {
  acquire_outcome outcome;
  std::size_t bytes;
  transfer_ticket loading;  ///< the load it waits for, still in flight when the call ended; or 0
  std::chrono::steady_clock::time_point loaded_at;  ///< when its last load's bytes arrived
};

class pager_observer {
 public:
  using clock = std::chrono::steady_clock;
  virtual ~pager_observer() = default;

  // ---- the tensor table's transitions ----------------------------------------------------------
  virtual void registered(const tensor_record&) {}
  virtual void unregistered(const tensor_record&) {}
  virtual void placed_resident(const tensor_record&) {}
  /// A load of the tensor started, at `priority` (a fault or a prefetch).
  virtual void load_started(const tensor_record&, transfer_priority) {}
  /// The tensor's load (`ticket`) finished: its bytes arrived at `at`, `latency` after it started.
  virtual void load_finished(const tensor_record&, transfer_ticket, clock::time_point /*at*/,
                             std::chrono::nanoseconds /*latency*/) {}
  /// The tensor's load (`ticket`) failed with `why` (io_error, corrupt_data, or a device error).
  virtual void load_failed(const tensor_record&, transfer_ticket, const std::exception_ptr&) {}
  /// The tensor left HBM (`how`) for `why`.
  virtual void evicted(const tensor_record&, eviction, cause) {}
  /// A write-back or a move of the tensor finished (`latency` when it succeeded, else 0).
  virtual void copy_finished(const tensor_record&, bool /*ok*/, std::chrono::nanoseconds) {}
  /// A compaction move of the tensor started.
  virtual void move_started(const tensor_record&) {}
  /// Its first pin of a run of overlapping pins / the last pin of that run was released.
  virtual void first_pin(const tensor_record&) {}
  virtual void last_release(const tensor_record&) {}
  /// An activation's last use was released (release_last_use): its content is dead.
  virtual void last_use(const tensor_record&) {}
  /// An unpinned activation's live content was discarded (pager::discard): it is dead.
  virtual void discarded(const tensor_record&) {}
  /// A dead activation gave up its HBM with no write-back (drop_dead).
  virtual void dead_dropped(const tensor_record&) {}

  // ---- loads detached from their tensor (evicted while loading) --------------------------------
  /// A detached load (`ticket`, of `bytes` for `name`, started at `started`; `fault`: a demand
  /// fault's, not a prefetch's) ended.
  virtual void detached_load_finished(transfer_ticket, bool /*ok*/, bool /*fault*/,
                                      clock::time_point /*started*/,
                                      std::chrono::nanoseconds /*latency*/, std::size_t /*bytes*/,
                                      const std::string& /*name*/) {}

  // ---- decisions that change no tensor ---------------------------------------------------------
  /// The out-of-memory ladder chose to wait for copies in flight (rung 3).
  virtual void ladder_waited() {}
  /// The ladder could free nothing more for `bytes` (its last rung: the caller throws).
  virtual void ladder_exhausted(std::size_t /*bytes*/) {}
  /// A compaction of `moves` moves started, for `why`.
  virtual void compaction_started(std::size_t /*moves*/, cause) {}
  /// A prefetch of the tensor was not issued: no room without evicting what is needed sooner.
  virtual void prefetch_skipped(const tensor_record&) {}
  /// Prefetches the compute stream did not wait for (`on_time`), or waited `stall` for.
  virtual void prefetches_on_time(std::uint32_t /*n*/) {}
  virtual void prefetches_late(std::uint32_t /*n*/, std::chrono::nanoseconds /*stall*/) {}

  // ---- calls, once each, when they end ---------------------------------------------------------
  /// An acquire of `n` tensors (`elements`) called at `called` succeeded.
  virtual void acquire_succeeded(const acquired_element* /*elements*/, std::size_t /*n*/,
                                 clock::time_point /*called*/) {}
  /// An acquire of `n` tensors failed; `exhausted`: the ladder's last rung failed one of them
  /// (ladder_exhausted told already).
  virtual void acquire_failed(std::size_t /*n*/, bool /*exhausted*/) {}
  /// A call blocked the host from `from` until now (waiting for a copy or a release).
  virtual void blocked(clock::time_point /*from*/) {}
  /// A registration spent `ns` of host time encoding a compressed weight.
  virtual void encoded(std::uint64_t /*ns*/) {}
};

/// Tells every observer in the list, in order.
class observer_list final : public pager_observer {
 public:
  void add(pager_observer* o) { list_.push_back(o); }
  void registered(const tensor_record& t) override { each(&pager_observer::registered, t); }
  void unregistered(const tensor_record& t) override { each(&pager_observer::unregistered, t); }
  void placed_resident(const tensor_record& t) override {
    each(&pager_observer::placed_resident, t);
  }
  void load_started(const tensor_record& t, transfer_priority p) override {
    each(&pager_observer::load_started, t, p);
  }
  void load_finished(const tensor_record& t, transfer_ticket k, clock::time_point at,
                     std::chrono::nanoseconds latency) override {
    each(&pager_observer::load_finished, t, k, at, latency);
  }
  void load_failed(const tensor_record& t, transfer_ticket k,
                   const std::exception_ptr& why) override {
    each(&pager_observer::load_failed, t, k, why);
  }
  void evicted(const tensor_record& t, eviction how, cause why) override {
    each(&pager_observer::evicted, t, how, why);
  }
  void copy_finished(const tensor_record& t, bool ok, std::chrono::nanoseconds latency) override {
    each(&pager_observer::copy_finished, t, ok, latency);
  }
  void move_started(const tensor_record& t) override { each(&pager_observer::move_started, t); }
  void first_pin(const tensor_record& t) override { each(&pager_observer::first_pin, t); }
  void last_release(const tensor_record& t) override { each(&pager_observer::last_release, t); }
  void last_use(const tensor_record& t) override { each(&pager_observer::last_use, t); }
  void discarded(const tensor_record& t) override { each(&pager_observer::discarded, t); }
  void dead_dropped(const tensor_record& t) override { each(&pager_observer::dead_dropped, t); }
  void detached_load_finished(transfer_ticket k, bool ok, bool fault, clock::time_point started,
                              std::chrono::nanoseconds latency, std::size_t bytes,
                              const std::string& name) override {
    each(&pager_observer::detached_load_finished, k, ok, fault, started, latency, bytes, name);
  }
  void ladder_waited() override { each(&pager_observer::ladder_waited); }
  void ladder_exhausted(std::size_t bytes) override {
    each(&pager_observer::ladder_exhausted, bytes);
  }
  void compaction_started(std::size_t moves, cause why) override {
    each(&pager_observer::compaction_started, moves, why);
  }
  void prefetch_skipped(const tensor_record& t) override {
    each(&pager_observer::prefetch_skipped, t);
  }
  void prefetches_on_time(std::uint32_t n) override {
    each(&pager_observer::prefetches_on_time, n);
  }
  void prefetches_late(std::uint32_t n, std::chrono::nanoseconds stall) override {
    each(&pager_observer::prefetches_late, n, stall);
  }
  void acquire_succeeded(const acquired_element* e, std::size_t n,
                         clock::time_point called) override {
    each(&pager_observer::acquire_succeeded, e, n, called);
  }
  void acquire_failed(std::size_t n, bool exhausted) override {
    each(&pager_observer::acquire_failed, n, exhausted);
  }
  void blocked(clock::time_point from) override { each(&pager_observer::blocked, from); }
  void encoded(std::uint64_t ns) override { each(&pager_observer::encoded, ns); }

 private:
  template <typename F, typename... A>
  void each(F f, const A&... a) {
    for (pager_observer* o : list_) (o->*f)(a...);
  }
  std::vector<pager_observer*> list_;
};

}  // namespace htp::detail
