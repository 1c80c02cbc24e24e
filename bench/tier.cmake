# htp-tier-bench: N processes, one per GPU, page one model from one host copy per node (the shared
# tier, or the weights file the ranks map), against a private copy per rank; and the shared link's
# rate error across processes (docs/benchmarks.md, "A process per GPU").
add_executable(htp-tier-bench tier/launcher.cpp tier/options.cpp tier/process.cpp tier/rank.cpp
  tier/link_rate.cpp)
target_link_libraries(htp-tier-bench PRIVATE htp::htp htp_bench_common CLI11::CLI11
  nlohmann_json::nlohmann_json htp_logging)
target_include_directories(htp-tier-bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
htp_target_warnings(htp-tier-bench)
