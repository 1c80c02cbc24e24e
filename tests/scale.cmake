# Tests of the scale simulator: timing-only sim devices.
htp_add_test(test_timing_only timing_only_test.cpp)
target_compile_definitions(test_timing_only PRIVATE HTP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
