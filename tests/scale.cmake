# Tests of the scale simulator: timing-only sim devices (issue 14).
htp_add_test(test_timing_only timing_only_test.cpp)
