# Tests of the node: several GPUs over one host tier.
htp_add_test(test_node node_test.cpp)
htp_add_test(test_collectives collectives_test.cpp)
htp_add_test(test_swap_shard swap_shard_test.cpp)

# A GPU thread of htp-stream-bench --gpus 3 that throws mid-run (HTP_STREAM_BENCH_FAIL=GPU:STEP,
# for tests) fails the run: the collectives are aborted, so the other GPUs' threads return instead
# of waiting for it, and the bench exits 1 with the error. A hang would hit the TIMEOUT.
if(HTP_BUILD_BENCH)
  # tensor-parallel takes the failure from the environment, swap-and-shard from the flags.
  foreach(mode tensor-parallel swap-and-shard)
    set(fail_flags "")
    if(mode STREQUAL "swap-and-shard")
      set(fail_flags ";--fail-gpu;1;--fail-at-step;1")
    endif()
    add_test(NAME stream_bench_node_gpu_failure_${mode}
      COMMAND ${CMAKE_COMMAND} -DHTP_PLAN=$<TARGET_FILE:htp-stream-bench> -DEXPECT_RC=1
        "-DEXPECT_TEXT=${mode} on 3 GPUs failed: injected failure \\(for tests\\): GPU 1 at step 1"
        "-DARGS=--backend;sim;--config;${CMAKE_CURRENT_SOURCE_DIR}/data/tiny-llama.config.json;--layers;4;--steps;2;--warmup;1;--hbm-budget;0.75;--slab-mib;1;--chunk-mib;1;--sim-link-gbps;2;--gpus;3;--node-only;--node-modes;${mode}${fail_flags}"
        -P ${CMAKE_CURRENT_SOURCE_DIR}/planner.cmake)
    set_tests_properties(stream_bench_node_gpu_failure_${mode} PROPERTIES TIMEOUT 120)
    if(mode STREQUAL "tensor-parallel")
      set_tests_properties(stream_bench_node_gpu_failure_${mode} PROPERTIES ENVIRONMENT HTP_STREAM_BENCH_FAIL=1:1)
    endif()
  endforeach()
endif()

# htp's NCCL collectives against a stand-in libnccl.so.2 (collectives_test.cpp built as a module
# with HTP_FAKE_NCCL_LIBRARY): abort, the pins that keep a communicator alive while a thread is
# inside it, deferred aborts. Needs no GPU and no NCCL.
add_library(htp_fake_nccl MODULE collectives_test.cpp)
target_compile_definitions(htp_fake_nccl PRIVATE HTP_FAKE_NCCL_LIBRARY)
htp_target_warnings(htp_fake_nccl)
add_executable(test_nccl_abort collectives_test.cpp)
target_compile_definitions(test_nccl_abort PRIVATE HTP_FAKE_NCCL_TEST)
target_link_libraries(test_nccl_abort PRIVATE htp::htp GTest::gtest GTest::gtest_main htp_logging ${CMAKE_DL_LIBS})
htp_target_warnings(test_nccl_abort)
add_dependencies(test_nccl_abort htp_fake_nccl)
gtest_discover_tests(test_nccl_abort DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 120 ENVIRONMENT "HTP_NCCL_LIBRARY=$<TARGET_FILE:htp_fake_nccl>")
htp_add_test(test_gradient_reducer gradient_reducer_test.cpp)
