# The weight codec on synthetic weights, and the device decode with --gpu-gib: htp-codec-bench.
add_executable(htp-codec-bench codec_bench.cpp)
target_link_libraries(htp-codec-bench PRIVATE htp::htp htp_bench_common CLI11::CLI11 nlohmann_json::nlohmann_json htp_logging)
htp_target_warnings(htp-codec-bench)
