# The node's shared tier (htp/shared_tier.hpp): one process per GPU over one segment. The test
# spawns shared_tier_child as the other ranks, and the htp-tier CLI when the tools are built.
add_executable(shared_tier_child shared_tier_child.cpp)
target_link_libraries(shared_tier_child PRIVATE htp::htp)
target_include_directories(shared_tier_child PRIVATE ${PROJECT_SOURCE_DIR}/src
  ${CMAKE_CURRENT_SOURCE_DIR})
htp_target_warnings(shared_tier_child)

htp_add_test(test_shared_tier shared_tier_test.cpp)
target_include_directories(test_shared_tier PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(test_shared_tier PRIVATE
  HTP_TIER_CHILD="$<TARGET_FILE:shared_tier_child>")
add_dependencies(test_shared_tier shared_tier_child)
if(HTP_BUILD_TOOLS)
  target_compile_definitions(test_shared_tier PRIVATE HTP_TIER_CLI="$<TARGET_FILE:htp-tier>")
  add_dependencies(test_shared_tier htp-tier)
endif()

# htp-tier-bench on sim, 4 processes: one host copy per node (tier and file), the private baseline,
# and a rank killed mid-run (tests/tier_bench_check.py).
if(HTP_BUILD_BENCH)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    add_test(NAME tier_bench_processes
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tier_bench_check.py
        $<TARGET_FILE:htp-tier-bench> ${CMAKE_CURRENT_BINARY_DIR}/tier_bench_check)
    set_tests_properties(tier_bench_processes PROPERTIES TIMEOUT 600)
  endif()
endif()
