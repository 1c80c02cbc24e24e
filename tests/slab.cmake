# Tests of the slab allocator: htp_add_test(...)
htp_add_test(test_slab_allocator slab_allocator_test.cpp)
htp_add_test(test_slab_random slab_random_test.cpp)
htp_add_test(test_slab_threads slab_threads_test.cpp)
htp_add_test(test_slab_pages slab_pages_test.cpp)

# The bench's full-size churn trace: no request fails with room, <= 2% waste after compaction.
find_package(Python3 COMPONENTS Interpreter)
if(HTP_BUILD_BENCH AND Python3_Interpreter_FOUND)
  add_test(NAME slab_churn_trace
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/slab_churn_check.py
      $<TARGET_FILE:htp-slab-bench> ${CMAKE_CURRENT_BINARY_DIR}/slab_churn_check)
  set_tests_properties(slab_churn_trace PROPERTIES TIMEOUT 600)
endif()
