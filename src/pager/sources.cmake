# Sources of the pager (pager_impl.hpp lists its components).
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/pager.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tiers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hints.cpp
  ${CMAKE_CURRENT_LIST_DIR}/acquire.cpp
  ${CMAKE_CURRENT_LIST_DIR}/completions.cpp
  ${CMAKE_CURRENT_LIST_DIR}/resident.cpp
  ${CMAKE_CURRENT_LIST_DIR}/file_backed.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compressed.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pager_metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prefetcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compute_pace.cpp
  ${CMAKE_CURRENT_LIST_DIR}/routed_groups.cpp
  ${CMAKE_CURRENT_LIST_DIR}/wait_probes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/room_maker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/room_compaction.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fences.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_table.cpp
  ${CMAKE_CURRENT_LIST_DIR}/victim_index.cpp
  ${CMAKE_CURRENT_LIST_DIR}/event_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pager_stats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decision_log.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trace.cpp
)
