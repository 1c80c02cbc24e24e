# What the benchmarks and the capacity planner share, in two small static libraries.

# htp_bench_shared: the workload models. Model presets (shapes, config.json reading, parameter
# counts), htp's HBM layout rules and Belady's MIN: #include "shared/model_shapes.hpp". The planner
# and the stream bench both link it, so the planner includes no benchmark's header.
add_library(htp_bench_shared STATIC shared/model_shapes.cpp shared/htp_layout.cpp shared/belady_min.cpp)
target_include_directories(htp_bench_shared PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(htp_bench_shared PUBLIC htp::htp PRIVATE nlohmann_json::nlohmann_json)
htp_target_warnings(htp_bench_shared)

# htp_bench_common: the drivers' device and option set-up (#include "common/bench_device.hpp").
add_library(htp_bench_common STATIC common/bench_device.cpp)
target_include_directories(htp_bench_common PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(htp_bench_common PUBLIC htp::htp CLI11::CLI11)
htp_target_warnings(htp_bench_common)
