// A pager's components without the pager: the tiers, a tensor table, a prefetcher and a room
// maker over a small sim device, wired as pager::impl wires them, with an observer that records
// what it is told. The focused tests of the room maker and the prefetcher drive them directly.
#pragma once

#include "pager_fixture.hpp"

#include "pager/prefetcher.hpp"
#include "pager/room_maker.hpp"
#include "pager/tensor_table.hpp"
#include "pager/tiers.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace htp::test {

/// Records the decisions it is told, one line each ("evict a clean demand", "load b prefetch").
struct recording_observer final : detail::pager_observer {
  std::vector<std::string> seen;
  void load_started(const detail::tensor_record& t, transfer_priority p) override {
    seen.push_back("load " + t.name + (p == transfer_priority::fault ? " fault" : " prefetch"));
  }
  void evicted(const detail::tensor_record& t, detail::eviction how, detail::cause why) override {
    static const char* hows[] = {"clean", "loading", "write-back"};
    static const char* whys[] = {"demand", "prefetch", "request"};
    seen.push_back("evict " + t.name + " " + hows[static_cast<int>(how)] + " " +
                   whys[static_cast<int>(why)]);
  }
  void ladder_waited() override { seen.push_back("ladder waits"); }
  void ladder_exhausted(std::size_t) override { seen.push_back("ladder exhausted"); }
  void prefetch_skipped(const detail::tensor_record& t) override {
    seen.push_back("prefetch skipped " + t.name);
  }
  void compaction_started(std::size_t moves, detail::cause) override {
    seen.push_back("compaction " + std::to_string(moves));
  }
  bool saw(const std::string& line) const {
    return std::find(seen.begin(), seen.end(), line) != seen.end();
  }
};

/// The components over a sim device with `hbm_slabs` slabs of HBM (64 KiB each).
struct components {
  explicit components(pager_config c)
      : config(std::move(c)), tiers(*dev, config), events(*dev),
        prefetch(*dev, config, tensors, *tiers.engine, seen),
        tensors(*dev, events, prefetch.future().schedule, prefetch.future().groups, seen,
                /*checked=*/true, /*stamp_pins=*/false),
        room(*dev, config, *tiers.hbm, *tiers.engine, tensors, events, prefetch.future(), seen) {}
  ~components() {
    tiers.engine->drain();
    compute.synchronize();
    room.synchronize_fences();
  }

  /// A tensor of `bytes` in the pinned tier; its slot.
  std::uint32_t add(const std::string& name, std::size_t bytes,
                    tensor_kind kind = tensor_kind::weight) {
    const extent h = tiers.host->allocate(bytes);
    return tensors
        .add(detail::tensor_spec::of(name, kind,
                                     tensor_source::in_pinned_tier(h.ptr, h.bytes, bytes)))
        .index;
  }
  /// What the pager does after each call: completions, retired releases, dropped fences.
  void reap() {
    for (const finished_transfer& d : tiers.engine->take_finished()) room.complete(d);
    tensors.retire_all_releases();
    room.drop_fences();
  }
  /// Loads `slot` as a fault would (the room must be there) and waits for it.
  void load(std::uint32_t slot) {
    const detail::demand_result r = room.for_demand(tensors[slot].bytes, true, false);
    ASSERT_TRUE(r.room.has_value()) << tensors[slot].name;
    room.load(slot, *r.room, transfer_priority::fault);
    tiers.engine->wait(tensors[slot].ticket);
    reap();
  }
  /// A release of `slot` on the compute stream (its event recorded now).
  void release(std::uint32_t slot, bool dirty = false) {
    const event_ref e = events.take();
    dev->record(e, compute);
    room.free_hbm(tensors.release(slot, {e, compute, ++seq}, dirty, /*supersede=*/true));
  }
  /// Loads, pins and releases `slot`: an acquire that faulted.
  void use(std::uint32_t slot, bool dirty = false) {
    if (tensors[slot].where == residency::host) load(slot);
    tensors.pin(slot);
    release(slot, dirty);
    compute.synchronize();
    reap();
  }
  /// The HBM bytes the tensors hold, move sources included (room_maker invariant 1).
  std::size_t bytes_held_by_tensors() const {
    std::size_t n = 0;
    for (std::uint32_t s = 0; s < tensors.size(); ++s) {
      if (tensors[s].hbm) n += tensors[s].hbm->bytes;
      if (tensors[s].move) n += tensors[s].move->from.bytes;
    }
    return n;
  }

  std::unique_ptr<device> dev = small_sim_device();
  pager_config config;
  detail::tiers tiers;
  recording_observer seen;
  detail::event_pool events;
  detail::prefetcher prefetch;  // owns the forecast the table keys by: first, as in pager::impl
  detail::tensor_table tensors;
  detail::room_maker room;
  stream compute{*dev};
  std::uint64_t seq = 0;
};

}  // namespace htp::test
