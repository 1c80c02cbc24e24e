# Benchmarks of the transfer engine.
add_executable(htp-transfer-bench transfer_bench.cpp)
target_link_libraries(htp-transfer-bench PRIVATE htp::htp htp_bench_common CLI11::CLI11 nlohmann_json::nlohmann_json htp_logging)
htp_target_warnings(htp-transfer-bench)

# A paged KV cache at vLLM's block counts: htp-kv-bench.
add_executable(htp-kv-bench kv_bench.cpp)
target_link_libraries(htp-kv-bench PRIVATE htp::htp htp_bench_common CLI11::CLI11 nlohmann_json::nlohmann_json htp_logging)
htp_target_warnings(htp-kv-bench)
