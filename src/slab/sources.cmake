# Sources of the slab allocator.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bitmap.cpp
  ${CMAKE_CURRENT_LIST_DIR}/size_classes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/free_index.cpp
  ${CMAKE_CURRENT_LIST_DIR}/core.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pinning.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fragmentation.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compaction.cpp
  ${CMAKE_CURRENT_LIST_DIR}/slab_allocator.cpp
)
