// htp::shared_tier: a node's host tier in POSIX shared memory, shared by the node's processes
// (one per GPU: vLLM, SGLang and torchrun workers). See docs/multi_gpu.md, "A process per GPU".
//
// The tier is one segment, /dev/shm/htp.<name>. The first process to open a name creates it; the
// others attach. It holds:
//  - named entries: byte ranges the processes agree on by name (a weight made at run time, a
//    rank's tensor-parallel shard, KV blocks). Each process lends the segment to its pager
//    (pager::add_host_region, registered with the driver once per process) and registers entries
//    with pager::register_tensor_at: the bytes exist once per node, however many ranks use them.
//  - rank slots: one per attached process (pid, process start time, the entries it holds);
//  - link cells: token buckets of links the node's GPUs share (shared_link::in_tier), so a link
//    budget holds across processes.
//
// Lifecycle and failure:
//  - publish() is all or nothing: a batch of names is created and filled by one caller, and every
//    other caller of the same names waits for it and gets the same bytes. When two ranks race to
//    publish the same names, one fills, the others wait. A publisher that throws or dies leaves
//    nothing behind (its reservations are taken back) and a waiter takes its place.
//  - A process that dies (kill -9) holds no lock for good: the segment's mutex is a robust
//    pthread mutex, and whoever next locks it takes the dead process's rank slot, entries and
//    waiting link counts back. Liveness is pid + process start time, so a reused pid is not
//    mistaken for the dead one.
//  - The segment is unlinked when its last process closes it, or, after a crash left it behind,
//    by the next open of that name (every rank slot dead: the segment is made anew).
//    list_shared_tiers / remove_shared_tier (and the htp-tier CLI) list and remove stale ones.
//  - Opening a tier made by another htp version, page size or layout throws invalid_argument
//    naming both. Opening one larger than /dev/shm can hold, or asking to lock more than the
//    memlock limit allows, throws out_of_memory before anything is made, naming the size needed
//    and the setting to change (docker --shm-size, ulimit -l).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace htp {

/// How to open a node's shared tier. Every process of the node passes the same name, bytes and
/// page_bytes (a mismatch is refused when attaching).
struct shared_tier_config {
  /// The tier's name: letters, digits, '.', '_' and '-' only, at most 200 characters. The segment
  /// is shm_dir/htp.<name>.
  std::string name;
  /// Bytes for entries (rounded up to page_bytes). The segment adds a header of about 20 KiB plus
  /// 296 bytes per entry slot (4.6 MiB for the default max_entries), padded to the data area's
  /// alignment (page_bytes, at most 2 MiB).
  std::size_t bytes = 0;
  /// Allocation unit of entries: a power of two from 4 KiB to 1 GiB.
  std::size_t page_bytes = std::size_t{64} << 10;
  /// Entries the tier can name at once (fixed at creation).
  std::size_t max_entries = 16384;
  /// Lock the segment in RAM (mlock), so the kernel never swaps it. Checked against
  /// RLIMIT_MEMLOCK at open (ulimit -l). Off by default: a pager pins what it lends from the tier
  /// through the driver (cudaHostRegister), which the memlock limit does not count.
  bool lock_in_memory = false;
  /// How long open() waits for a creator to finish making the segment, and publish() for another
  /// rank to finish filling entries it waits on, before it throws htp::logic_error.
  std::chrono::milliseconds timeout{60000};
  /// Where POSIX shared memory lives (tests point it elsewhere only for preflight checks).
  std::string shm_dir = "/dev/shm";
};

/// One named entry of a tier, mapped into this process.
struct shared_entry {
  std::string name;
  void* data = nullptr;   ///< in this process's mapping of the segment
  std::size_t bytes = 0;  ///< as published (the extent is rounded up to page_bytes)
};

/// A request to publish one entry: its name and size.
struct shared_entry_request {
  std::string name;
  std::size_t bytes = 0;
};

/// What list_shared_tiers reports of one segment.
struct shared_tier_listing {
  std::string name;
  std::string path;
  std::size_t segment_bytes = 0;
  std::size_t live_ranks = 0;  ///< attached processes still alive
  std::size_t dead_ranks = 0;  ///< slots of processes that died without closing
  std::size_t entries = 0;
  std::size_t entry_bytes = 0;  ///< bytes of published entries
  bool stale = false;           ///< no live process: remove_shared_tier would remove it
  std::string problem;          ///< non-empty when the segment could not be read (other version)
};

class shared_link;

/// A process's handle on a node's shared tier. Thread-safe: every method may be called from any
/// thread of the process.
class shared_tier {
 public:
  /// Opens `config.name`: creates the segment if no live one exists (removing a stale one left by
  /// a crash), else attaches to it, and takes a rank slot for this process.
  /// @throws htp::invalid_argument for a bad name, zero bytes, a bad page size, or a tier of this
  /// name made with another version, page size, size or layout (the message names both);
  /// htp::out_of_memory (preflight) if shm_dir cannot hold the segment or lock_in_memory asks
  /// for more than RLIMIT_MEMLOCK, naming the bytes needed and the setting to change;
  /// htp::logic_error if every rank slot is taken or the creator did not finish in `timeout`;
  /// htp::io_error if a system call fails.
  static std::unique_ptr<shared_tier> open(const shared_tier_config& config);

  /// Closes this process's handle: gives its entries back (an entry no rank holds is freed), frees
  /// its rank slot, and unlinks the segment when no other process is attached. Never throws.
  ~shared_tier();
  shared_tier(const shared_tier&) = delete;
  shared_tier& operator=(const shared_tier&) = delete;

  /// Publishes a batch of entries, all or nothing, and holds them for this process. If none of
  /// the names exists, this caller reserves them all, runs `fill` on them (outside the tier's
  /// lock: fill copies the bytes in), and publishes them. If all exist with the same sizes, it
  /// waits until their publisher has filled them and returns them (`fill` is not called). When
  /// several processes race on the same batch, exactly one fills it. If `fill` throws, or its
  /// process dies, the reservation is taken back (nothing is published) and a waiter fills
  /// instead. Returns the entries in request order.
  /// @throws htp::invalid_argument for an empty batch, a repeated, empty or over-long (> 255)
  /// name, zero bytes, or a batch that only partly exists or exists with other sizes (the message
  /// names the first such entry); htp::out_of_memory if the tier cannot hold the batch (used,
  /// free, largest free extent); htp::logic_error if a publisher did not finish within the
  /// timeout; whatever `fill` throws (after taking the reservation back).
  std::vector<shared_entry> publish(const std::vector<shared_entry_request>& batch,
                                    const std::function<void(std::vector<shared_entry>&)>& fill);
  /// The entry `name` if it is published (holding it for this process), or an empty entry
  /// (data == nullptr) if it is not. Does not wait. @throws htp::invalid_argument for a bad name.
  shared_entry find(const std::string& name);
  /// Stops holding `name`; it is freed when no process holds it. A hold is one per handle, not a
  /// count: publishing or finding an entry this handle already holds does not add a second one.
  /// @throws htp::invalid_argument if this process does not hold it.
  void release(const std::string& name);

  /// The link cell `name` of the tier (made on first use with `bytes_per_second` and
  /// `burst_bytes`; later callers get the same cell, and a different rate or burst is refused),
  /// as a shared_link to give a transfer engine (transfer_config::upstream, node links). Its
  /// tokens and waiting counts live in the segment, so every process's engines draw from one
  /// budget; priorities hold across processes. The tier must outlive the link.
  /// @throws htp::invalid_argument for a bad name, a zero rate or burst, or a rate or burst other
  /// than the cell's; htp::out_of_memory if the tier's link cells are all used (16).
  std::shared_ptr<shared_link> link(const std::string& name, std::uint64_t bytes_per_second,
                                    std::uint64_t burst_bytes);

  /// The whole data area: lend it once per process (pager::add_host_region with
  /// host_region_kind::pageable) so every entry registers with register_tensor_at. Never throws.
  void* data() const noexcept;
  std::size_t data_bytes() const noexcept;
  /// This process's rank slot in the tier (0 .. max ranks - 1). Never throws.
  std::size_t slot() const noexcept;
  /// Whether this process created the segment. Never throws.
  bool created() const noexcept;
  const shared_tier_config& config() const noexcept;
  /// A snapshot of the segment (as list_shared_tiers reports it). Thread-safe.
  shared_tier_listing describe() const;

  /// Most processes one tier serves.
  static constexpr std::size_t max_ranks = 64;

  struct impl;

 private:
  explicit shared_tier(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Every htp tier segment in `shm_dir`. Never throws but std::bad_alloc (an unreadable segment is
/// listed with its problem).
std::vector<shared_tier_listing> list_shared_tiers(const std::string& shm_dir = "/dev/shm");
/// Removes the segment `name` if no live process is attached (stale) or `force`; returns whether
/// it removed one. Processes still attached keep their mapping until they close it.
/// @throws htp::invalid_argument for a bad name; htp::logic_error if live processes are attached
/// and !force; htp::io_error if the unlink fails.
bool remove_shared_tier(const std::string& name, bool force = false,
                        const std::string& shm_dir = "/dev/shm");

}  // namespace htp
