// htp-tier-bench: N processes, one per GPU as torchrun and the engines run them, page one model's
// weights from one host copy per node. See docs/benchmarks.md, "A process per GPU".
//
// The launcher (launcher.cpp) makes the weights, spawns the ranks (this binary again, --child R),
// waits for them with a deadline and writes one JSON. Each rank (rank.cpp) opens the node's shared
// tier, lends its host copy to a pager of its own and streams every layer through HBM for some
// steps, checksumming every page-in on the device against the launcher's checksums. Where the host
// copy is:
//  - tier:    published once into the node's shared tier (the first rank fills it);
//  - file:    the weights file, mapped read-only by every rank (the page cache holds it once);
//  - private: each rank copies the weights into its own pinned tier (what a pager per process
//             does without a shared tier: N copies; the baseline).
// The ranks' H2D copies also draw from one link cell in the tier (--shared-link-gbps), so the
// node's link budget holds across processes; the report gives each rank's share of it.
#pragma once

#include "common/bench_device.hpp"

#include <htp/shared_tier.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace htp::bench::tier {

struct options {
  int processes = 4;
  std::size_t weight_bytes = std::size_t{2} << 30;  ///< the model, every layer together
  std::size_t layer_bytes = std::size_t{64} << 20;
  std::string source = "tier";  ///< tier, file or private
  double hbm_fraction = 0.25;   ///< each rank's HBM budget, of the weights
  int steps = 4;                ///< timed steps (after one warm-up step)
  bool verify = true;           ///< checksum every page-in on the device
  std::size_t chunk_bytes = std::size_t{2} << 20;
  double shared_link_gbps = 0;  ///< the node's link cell: 0 = none
  int kill_rank = -1;           ///< SIGKILL this rank once it reports kill_at_step
  int kill_at_step = 1;
  bool link_rate = false;  ///< measure the link cell's rate error instead (link_rate.cpp)
  double link_seconds = 2;
  double timeout_s = 300;  ///< every rank must be done by then
  std::string tier_name;   ///< default: htp-tier-bench-<launcher pid>
  std::string out;         ///< JSON path ("" = stdout)
  device_options device;
  // Set by the launcher for its ranks.
  int child = -1;
  std::string dir;  ///< the run's directory: weights file, checksums, rank results
  std::int64_t start_ns = 0;
};

/// Parses argv into `o`; returns false after printing help or an error (exit code in *rc).
bool parse(int argc, char** argv, options& o, int* rc);
/// The node's tier as the launcher and every rank open it (all must pass the same size): room for
/// the weights with the tier source, else a small one that holds only the link cells.
shared_tier_config tier_config(const options& o);
/// The arguments that give a rank the same options (for posix_spawn).
std::vector<std::string> child_arguments(const options& o, int rank);

/// Layer i's bytes are htp::fill_pattern(seed_of(i)).
inline std::uint64_t seed_of(std::size_t layer) { return 0x5eed0000u + layer; }
inline std::size_t layers_of(const options& o) {
  return (o.weight_bytes + o.layer_bytes - 1) / o.layer_bytes;
}
inline std::size_t bytes_of(const options& o, std::size_t layer) {
  return layer + 1 < layers_of(o) ? o.layer_bytes : o.weight_bytes - layer * o.layer_bytes;
}

/// A rank's run: its JSON (rank.cpp). Exit code 0 when every checksum matched.
int run_rank(const options& o);
/// The link cell's rate error with N processes against N threads in one process (link_rate.cpp),
/// run by the launcher and by each rank (o.child >= 0).
int run_link_rate(const options& o);

/// What /proc says about this process's memory: private and proportional resident bytes.
struct process_memory {
  std::uint64_t rss = 0, pss = 0, private_bytes = 0, shared_bytes = 0;
  std::uint64_t anonymous_bytes = 0;  ///< private memory not backed by a file or shared memory
};
process_memory memory_of_self();
/// Bytes of `path` resident in the page cache (mincore over a read-only mapping).
std::uint64_t page_cache_bytes(const std::string& path);
/// Bytes a tmpfs file holds (its allocated blocks).
std::uint64_t allocated_bytes(const std::string& path);

/// Spawns this binary with `args`; returns the pid. @throws htp::io_error.
int spawn_self(const std::vector<std::string>& args);
/// Waits for every pid until `deadline_ns` (steady clock); kills what is left. Returns each exit
/// status (-signal for a killed process, -9999 for one killed at the deadline). `on_poll` runs
/// between polls (the launcher kills a rank from it).
std::vector<int> wait_all(const std::vector<int>& pids, std::int64_t deadline_ns,
                          const std::function<void()>& on_poll);

/// Writes `j` to `path` ("" = stdout), atomically for files. @throws htp::io_error.
void write_json(const nlohmann::json& j, const std::string& path);
/// Reads a JSON file. @throws htp::io_error.
nlohmann::json read_json(const std::string& path);

}  // namespace htp::bench::tier
