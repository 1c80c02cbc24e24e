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
