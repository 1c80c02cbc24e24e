# The mixture-of-experts benchmark: htp-moe-bench (routed experts paged without a schedule, against
# an offline Belady oracle). It shares the stream bench's layer compute.
add_executable(htp-moe-bench
  moe/moe_bench.cpp moe/options.cpp moe/routing.cpp moe/runner.cpp stream/sim_compute.cpp)
if(HTP_WITH_CUDA)
  target_sources(htp-moe-bench PRIVATE stream/cuda_compute.cu)
  target_link_libraries(htp-moe-bench PRIVATE CUDA::cublas)
else()
  target_sources(htp-moe-bench PRIVATE stream/no_cuda_compute.cpp)
endif()
target_link_libraries(htp-moe-bench PRIVATE htp::htp htp_bench_shared htp_bench_common CLI11::CLI11
                      nlohmann_json::nlohmann_json htp_logging)
target_include_directories(htp-moe-bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
htp_target_warnings(htp-moe-bench)
