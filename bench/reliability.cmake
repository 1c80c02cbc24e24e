# Reliability tools: the GPU integrity run
add_executable(htp-integrity integrity.cpp)
target_link_libraries(htp-integrity PRIVATE htp::htp htp_bench_common CLI11::CLI11 nlohmann_json::nlohmann_json htp_logging)
htp_target_warnings(htp-integrity)
if(HTP_BUILD_TESTS)
  # A brief run on sim, so the program (and its exit status) is tested in every build.
  add_test(NAME integrity_sim_brief
           COMMAND htp-integrity --backend sim --tensors 60 --max-mib 2 --hbm-mib 16 --ops 600
                   --compact-every 100 --checked)
  set_tests_properties(integrity_sim_brief PROPERTIES TIMEOUT 300)
endif()
