# The static planner: layout, event model, choice against brute force.
htp_add_test(test_static_plan static_plan_test.cpp)
# The static step on each backend (cuda cases skip without a GPU): eager, captured and replayed.
htp_add_test(test_static_step static_step_test.cpp)
target_include_directories(test_static_step PRIVATE ${PROJECT_SOURCE_DIR}/bench)
