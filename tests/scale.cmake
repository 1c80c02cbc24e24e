# Tests of the scale simulator: timing-only sim devices (docs/sim.md).
htp_add_test(test_timing_only timing_only_test.cpp)
