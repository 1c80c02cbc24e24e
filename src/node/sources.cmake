# Sources of the node: several GPUs over one host tier (issue 13).
target_sources(htp PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/topology.cpp
  ${CMAKE_CURRENT_LIST_DIR}/node.cpp
)
