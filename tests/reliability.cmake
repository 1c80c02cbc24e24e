# Reliability tests: fault injection, stress, fuzz regression replay (docs/reliability.md)
htp_add_test(test_fault_injection fault_injection_test.cpp fault_scenario.cpp)
htp_add_test(test_reliability_stress reliability_stress_test.cpp)

# Fuzz regression replay: each fuzz target's source with a main() that feeds it every committed
# corpus file and every past crash (fuzz/regressions/<target>/), in this (gcc) build too.
foreach(target fuzz_slab_allocator fuzz_token_bucket fuzz_pager fuzz_codec
               fuzz_safetensors_header)
  add_executable(${target}_replay ${PROJECT_SOURCE_DIR}/fuzz/${target}.cpp
                                  ${PROJECT_SOURCE_DIR}/fuzz/replay_main.cpp)
  target_link_libraries(${target}_replay PRIVATE htp::htp)
  htp_target_warnings(${target}_replay)
  add_test(NAME ${target}_replay
           COMMAND ${target}_replay ${PROJECT_SOURCE_DIR}/fuzz/corpus/${target}
                                    ${PROJECT_SOURCE_DIR}/fuzz/regressions/${target})
  set_tests_properties(${target}_replay PROPERTIES TIMEOUT 300)
endforeach()
