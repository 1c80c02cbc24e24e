// htp-tier: lists and removes the node's shared tiers (htp/shared_tier.hpp), the segments
// shm_dir/htp.<name> that htp processes share. Exit codes: 0 done, 1 a removal was refused or
// failed, 2 bad input. docs/multi_gpu.md, "A process per GPU: the shared tier".
//   htp-tier list [--shm-dir D]
//   htp-tier remove NAME [--force] [--shm-dir D]
//   htp-tier remove --stale [--shm-dir D]
#include <htp/error.hpp>
#include <htp/shared_tier.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

void print_list(const std::string& shm_dir) {
  const std::vector<htp::shared_tier_listing> tiers = htp::list_shared_tiers(shm_dir);
  if (tiers.empty()) {
    std::printf("no htp shared tiers in %s\n", shm_dir.c_str());
    return;
  }
  std::printf("%-32s %14s %5s %5s %8s %14s  %s\n", "name", "bytes", "live", "dead", "entries",
              "entry bytes", "state");
  for (const htp::shared_tier_listing& t : tiers) {
    const char* state = t.stale ? "stale" : t.problem.empty() ? "live" : "unreadable";
    std::printf("%-32s %14zu %5zu %5zu %8zu %14zu  %s%s%s\n", t.name.c_str(), t.segment_bytes,
                t.live_ranks, t.dead_ranks, t.entries, t.entry_bytes, state,
                t.problem.empty() ? "" : ": ", t.problem.c_str());
  }
}

int remove_stale(const std::string& shm_dir) {
  int removed = 0;
  int rc = 0;
  for (const htp::shared_tier_listing& t : htp::list_shared_tiers(shm_dir)) {
    if (!t.stale) continue;
    try {
      if (htp::remove_shared_tier(t.name, false, shm_dir)) {
        std::printf("removed %s\n", t.path.c_str());
        ++removed;
      }
    } catch (const std::exception& e) {  // became live meanwhile, or the unlink failed
      std::fprintf(stderr, "htp-tier: %s\n", e.what());
      rc = 1;
    }
  }
  std::printf("%d stale tier(s) removed from %s\n", removed, shm_dir.c_str());
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"htp-tier: list and remove the node's htp shared tiers (POSIX shared memory)"};
  app.require_subcommand(1);
  std::string shm_dir = "/dev/shm";
  CLI::App* list = app.add_subcommand("list", "list every htp tier segment, live or stale");
  list->add_option("--shm-dir", shm_dir, "where the segments live")->capture_default_str();
  CLI::App* remove =
      app.add_subcommand("remove", "remove a tier (no live process) or every stale one");
  std::string name;
  bool force = false;
  bool stale = false;
  remove->add_option("name", name, "the tier's name (the segment is <shm-dir>/htp.<name>)");
  remove->add_flag("--force", force,
                   "remove it even if live processes use it (they keep it mapped)");
  remove->add_flag("--stale", stale, "remove every tier no live process uses");
  remove->add_option("--shm-dir", shm_dir, "where the segments live")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (list->parsed()) {
      print_list(shm_dir);
      return 0;
    }
    if (stale == !name.empty()) {
      std::fprintf(stderr, "htp-tier remove: give either a NAME or --stale\n");
      return 2;
    }
    if (stale) return remove_stale(shm_dir);
    if (!htp::remove_shared_tier(name, force, shm_dir)) {
      std::fprintf(stderr, "htp-tier: no tier '%s' in %s\n", name.c_str(), shm_dir.c_str());
      return 1;
    }
    std::printf("removed %s/htp.%s\n", shm_dir.c_str(), name.c_str());
    return 0;
  } catch (const htp::invalid_argument& e) {
    std::fprintf(stderr, "htp-tier: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "htp-tier: %s\n", e.what());
    return 1;
  }
}
