# The capacity planner and model presets

# The planner as a library (testable) and the htp-plan CLI over it.
add_library(htp_bench_planner STATIC planner/planner.cpp planner/htp_model.cpp planner/gpu_presets.cpp
  planner/bench_json.cpp planner/matrix.cpp)
target_include_directories(htp_bench_planner PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(htp_bench_planner PUBLIC htp_bench_shared
  PRIVATE nlohmann_json::nlohmann_json)
htp_target_warnings(htp_bench_planner)

add_executable(htp-plan htp_plan.cpp)
target_link_libraries(htp-plan PRIVATE htp_bench_planner CLI11::CLI11
  nlohmann_json::nlohmann_json)
htp_target_warnings(htp-plan)
