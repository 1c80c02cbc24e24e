# What the benchmarks share. The workload models (model presets, htp's layout rules, Belady's MIN)
# are tools/' htp_bench_shared, which the capacity planner links too.

# htp_bench_common: the drivers' device and option set-up (#include "common/bench_device.hpp") and
# the pager's counters by name for their results (common/pager_counters.hpp).
add_library(htp_bench_common STATIC common/bench_device.cpp common/pager_counters.cpp)
target_include_directories(htp_bench_common PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(htp_bench_common PUBLIC htp::htp CLI11::CLI11 nlohmann_json::nlohmann_json)
htp_target_warnings(htp_bench_common)
