# Tests of model presets and the planner

# Run as a script (cmake -DHTP_PLAN=... -DEXPECT_RC=N -DARGS=a;b -P planner.cmake): runs htp-plan
# and checks its exit code exactly (WILL_FAIL would accept a crash).
if(CMAKE_SCRIPT_MODE_FILE)
  string(REPLACE ";" " " shown "${ARGS}")
  execute_process(COMMAND ${HTP_PLAN} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL EXPECT_RC)
    message(FATAL_ERROR "htp-plan ${shown}: exit code ${rc}, expected ${EXPECT_RC}\n${out}\n${err}")
  endif()
  if(DEFINED EXPECT_TEXT AND NOT "${out}${err}" MATCHES "${EXPECT_TEXT}")
    message(FATAL_ERROR "htp-plan ${shown}: output lacks '${EXPECT_TEXT}'\n${out}\n${err}")
  endif()
  message(STATUS "htp-plan ${shown}: exit code ${rc} as expected")
  return()
endif()

if(HTP_BUILD_TOOLS)  # the libraries under test and htp-plan live in tools/
  htp_add_test(test_model_shapes model_shapes_test.cpp)
  target_link_libraries(test_model_shapes PRIVATE htp_bench_shared)
  target_compile_definitions(test_model_shapes PRIVATE
    HTP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")

  htp_add_test(test_belady_min belady_min_test.cpp)
  target_link_libraries(test_belady_min PRIVATE htp_bench_shared)

  htp_add_test(test_htp_model htp_model_test.cpp)
  target_link_libraries(test_htp_model PRIVATE htp_bench_planner)

  htp_add_test(test_planner planner_test.cpp)
  target_link_libraries(test_planner PRIVATE htp_bench_planner)
  target_compile_definitions(test_planner PRIVATE
    HTP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")

  function(htp_plan_cli_test name expect_rc expect_text)
    add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -DHTP_PLAN=$<TARGET_FILE:htp-plan>
      -DEXPECT_RC=${expect_rc} -DEXPECT_TEXT=${expect_text} "-DARGS=${ARGN}"
      -P ${CMAKE_CURRENT_SOURCE_DIR}/planner.cmake)
  endfunction()
  htp_plan_cli_test(planner_cli_preset 0 "MEETS"
    --model gpt3-175b --dtype fp16 --gpus 8 --hbm-gb 40 --host-gb 256 --page-ms 0.8 --gpu A100-40GB)
  htp_plan_cli_test(planner_cli_config 0 "resident"
    --config ${CMAKE_CURRENT_SOURCE_DIR}/data/mixtral-8x7b.config.json --gpu H200
    --bench-json ${CMAKE_CURRENT_SOURCE_DIR}/data/stream-bench.json)
  htp_plan_cli_test(planner_cli_unknown_preset 2 "unknown model preset 'no-such-model'"
    --model no-such-model)
  htp_plan_cli_test(planner_cli_bad_option 2 "--bogus" --model llama-3.1-8b --bogus)
  htp_plan_cli_test(planner_cli_host_too_small 2 "host RAM is too small"
    --model gpt3-175b --dtype fp16 --gpus 8 --hbm-gb 40 --host-gb 16 --gpu A100-40GB)
  # The case study under torchrun: private copies per process do not fit 256 GB; one per node does.
  htp_plan_cli_test(planner_cli_private_copies_per_process 2 "a private copy in each of the 8"
    --model opt-175b --dtype fp16 --gpus 8 --hbm-gb 40 --host-gb 256 --page-ms 0.8 --gpu A100-40GB
    --host-copies process)
  htp_plan_cli_test(planner_cli_one_copy_per_node 0 "MEETS"
    --model opt-175b --dtype fp16 --gpus 8 --hbm-gb 40 --host-gb 256 --page-ms 0.8 --gpu A100-40GB
    --host-copies node)
  htp_plan_cli_test(planner_cli_bad_gpus 2 "--gpus 0 must be in"
    --model opt-175b --gpus 0)
  htp_plan_cli_test(planner_cli_matrix 0 "tensor-parallel\\+paging"
    --model opt-175b --dtype fp16 --gpus 8 --hbm-gb 40 --host-gb 256 --gpu A100-40GB --matrix)
  htp_plan_cli_test(planner_cli_bad_matrix_batches 2 "is not a whole number"
    --model opt-175b --dtype fp16 --gpus 8 --hbm-gb 40 --host-gb 256 --matrix --matrix-batches 1,x)

  # The htp model against the timing-only simulation: scripts/plan-check.py re-plans the
  # bench JSONs of its seven configurations committed with the results and fails beyond 10%.
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    add_test(NAME planner_predicts_sim COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/plan-check.py
      --from ${PROJECT_SOURCE_DIR}/docs/results/2026-12-03-sim-plan-check --plan $<TARGET_FILE:htp-plan>
      --out ${CMAKE_CURRENT_BINARY_DIR}/plan-check)
  endif()

  # scripts/plot.py on the sample JSON, when a Python with matplotlib is around.
  find_program(HTP_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(HTP_PYTHON3)
    execute_process(COMMAND ${HTP_PYTHON3} -c "import matplotlib" RESULT_VARIABLE htp_no_mpl
      OUTPUT_QUIET ERROR_QUIET)
    if(htp_no_mpl EQUAL 0)
      add_test(NAME planner_plot_script COMMAND ${HTP_PYTHON3} ${PROJECT_SOURCE_DIR}/scripts/plot.py
        --bench ${CMAKE_CURRENT_SOURCE_DIR}/data/stream-bench.json
        --trace ${CMAKE_CURRENT_SOURCE_DIR}/data/trace.json
        --matrix ${CMAKE_CURRENT_SOURCE_DIR}/data/plan-matrix.json
        --out ${CMAKE_CURRENT_BINARY_DIR}/plots)
    endif()
  endif()
endif()

# htp-stream-bench: a short run on sim, its JSON schema and its consistency with the trace.
find_package(Python3 COMPONENTS Interpreter)
if(HTP_BUILD_BENCH AND Python3_Interpreter_FOUND)
  add_test(NAME stream_bench_sim_json
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/stream_bench_check.py
      $<TARGET_FILE:htp-stream-bench> ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny-llama.config.json
      ${CMAKE_CURRENT_BINARY_DIR}/stream_bench_check)
  set_tests_properties(stream_bench_sim_json PROPERTIES TIMEOUT 600)
  # htp-stream-bench --static: the static schemes captured and replayed, on real bytes.
  add_test(NAME stream_bench_static_json
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/stream_bench_static_check.py
      $<TARGET_FILE:htp-stream-bench> ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny-llama.config.json
      ${CMAKE_CURRENT_BINARY_DIR}/stream_bench_static_check)
  set_tests_properties(stream_bench_static_json PROPERTIES TIMEOUT 600)
  # htp-stream-bench --train: the training step on timing-only sim, bytes against Belady's.
  add_test(NAME stream_bench_train_json
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/stream_bench_train_check.py
      $<TARGET_FILE:htp-stream-bench> ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny-llama.config.json
      ${CMAKE_CURRENT_BINARY_DIR}/stream_bench_train_check)
  set_tests_properties(stream_bench_train_json PROPERTIES TIMEOUT 300)
  # htp-moe-bench: a tiny run (2 layers of Mixtral-8x7B, timing-only sim), its JSON and its trace.
  add_test(NAME moe_bench_sim_json
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/moe_bench_check.py
      $<TARGET_FILE:htp-moe-bench> ${CMAKE_CURRENT_BINARY_DIR}/moe_bench_check)
  set_tests_properties(moe_bench_sim_json PROPERTIES TIMEOUT 300)
  add_test(NAME stream_bench_node_json
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/stream_bench_node_check.py
      $<TARGET_FILE:htp-stream-bench> ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny-llama.config.json
      ${CMAKE_CURRENT_BINARY_DIR}/stream_bench_node_check)
  set_tests_properties(stream_bench_node_json PROPERTIES TIMEOUT 600)
  # The design's case study at full size on timing-only sim: 350 GB on 8 x 40 GB.
  add_test(NAME stream_bench_case_study
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/case_study_check.py
      $<TARGET_FILE:htp-stream-bench> ${CMAKE_CURRENT_BINARY_DIR}/case_study_check)
  set_tests_properties(stream_bench_case_study PROPERTIES TIMEOUT 600)
  add_test(NAME stream_bench_bad_preset COMMAND ${CMAKE_COMMAND} -DHTP_PLAN=$<TARGET_FILE:htp-stream-bench>
    -DEXPECT_RC=2 "-DEXPECT_TEXT=unknown model preset" "-DARGS=--model;no-such-model"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/planner.cmake)
  add_test(NAME stream_bench_budget_too_small COMMAND ${CMAKE_COMMAND} -DHTP_PLAN=$<TARGET_FILE:htp-stream-bench>
    -DEXPECT_RC=2 "-DEXPECT_TEXT=smaller than one layer" "-DARGS=--backend;sim;--layers;2;--hbm-budget;0.1"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/planner.cmake)
endif()
