# The streaming benchmark: htp-stream-bench.
add_executable(htp-stream-bench
  stream/stream_bench.cpp stream/options.cpp stream/runner.cpp stream/report.cpp stream/sim_compute.cpp
  stream/node_runner.cpp stream/node_plan.cpp stream/node_weights.cpp stream/node_threads.cpp
  stream/node_results.cpp stream/node_report.cpp stream/static_runner.cpp
  stream/train_runner.cpp
  stream/zero2_runner.cpp)
if(HTP_WITH_CUDA)
  target_sources(htp-stream-bench PRIVATE stream/cuda_compute.cu)
  target_link_libraries(htp-stream-bench PRIVATE CUDA::cublas)
else()
  target_sources(htp-stream-bench PRIVATE stream/no_cuda_compute.cpp)
endif()
target_link_libraries(htp-stream-bench PRIVATE htp::htp htp_bench_shared htp_bench_common CLI11::CLI11
                      nlohmann_json::nlohmann_json htp_logging)
target_include_directories(htp-stream-bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
htp_target_warnings(htp-stream-bench)
