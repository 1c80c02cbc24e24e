# The node's host tier in POSIX shared memory, shared by the node's processes (htp/shared_tier.hpp).
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/segment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/open.cpp
  ${CMAKE_CURRENT_LIST_DIR}/entries.cpp
  ${CMAKE_CURRENT_LIST_DIR}/listing.cpp
  # TEMPORARY: delete with the file once src/transfer/link_cell.cpp is merged.
)
