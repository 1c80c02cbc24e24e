# The static planner: layout, event model, choice against brute force.
htp_add_test(test_static_plan static_plan_test.cpp)
