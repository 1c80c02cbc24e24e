# Sources of the node: several GPUs over one host tier.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/topology.cpp
  ${CMAKE_CURRENT_LIST_DIR}/node.cpp
  ${CMAKE_CURRENT_LIST_DIR}/links.cpp
)
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/sim_collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/one_rank_collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rank_segment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rank_collectives.cpp
)
target_link_libraries(htp_objects PRIVATE ${CMAKE_DL_LIBS})
target_sources(htp_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/swap_shard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gradient_reducer.cpp)
