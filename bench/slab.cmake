# Benchmarks of the slab allocator
find_package(benchmark REQUIRED)
add_executable(htp-slab-bench slab_bench.cpp)
target_link_libraries(htp-slab-bench PRIVATE htp::htp htp_bench_common benchmark::benchmark nlohmann_json::nlohmann_json
  CLI11::CLI11)
htp_target_warnings(htp-slab-bench)

# Per-call cost of the pager against the number of registered tensors
add_executable(htp-pager-bench pager_bench.cpp)
target_link_libraries(htp-pager-bench PRIVATE htp::htp htp_bench_common benchmark::benchmark htp_logging)
htp_target_warnings(htp-pager-bench)
