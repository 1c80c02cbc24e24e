# Tests of the node: several GPUs over one host tier (issue 13).
htp_add_test(test_node node_test.cpp)
htp_add_test(test_collectives collectives_test.cpp)
htp_add_test(test_swap_shard swap_shard_test.cpp)

# A GPU thread of htp-stream-bench --gpus 3 that throws mid-run (HTP_STREAM_BENCH_FAIL=GPU:STEP,
# for tests) fails the run: the collectives are aborted, so the other GPUs' threads return instead
# of waiting for it, and the bench exits 1 with the error. A hang would hit the TIMEOUT.
if(HTP_BUILD_BENCH)
  foreach(mode tensor-parallel swap-and-shard)
    add_test(NAME stream_bench_node_gpu_failure_${mode}
      COMMAND ${CMAKE_COMMAND} -DHTP_PLAN=$<TARGET_FILE:htp-stream-bench> -DEXPECT_RC=1
        "-DEXPECT_TEXT=${mode} on 3 GPUs failed: injected failure \\(for tests\\): GPU 1 at step 1"
        "-DARGS=--backend;sim;--config;${CMAKE_CURRENT_SOURCE_DIR}/data/tiny-llama.config.json;--layers;4;--steps;2;--warmup;1;--hbm-budget;0.75;--slab-mib;1;--chunk-mib;1;--sim-link-gbps;2;--gpus;3;--node-only;--node-modes;${mode}"
        -P ${CMAKE_CURRENT_SOURCE_DIR}/planner.cmake)
    set_tests_properties(stream_bench_node_gpu_failure_${mode} PROPERTIES TIMEOUT 120
      ENVIRONMENT HTP_STREAM_BENCH_FAIL=1:1)
  endforeach()
endif()
