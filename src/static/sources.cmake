# Sources of the static plan and step (static_plan.hpp, static_step.hpp): fixed addresses for a
# step that CUDA graphs replay, a component beside the dynamic pager.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/checks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/baselines.cpp
  ${CMAKE_CURRENT_LIST_DIR}/step.cpp
)
