# Sources of the transfer engine.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/token_bucket.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shared_link.cpp
  ${CMAKE_CURRENT_LIST_DIR}/link_cell.cpp
  ${CMAKE_CURRENT_LIST_DIR}/value_word_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/calibration.cpp
  ${CMAKE_CURRENT_LIST_DIR}/link_checks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/file_checks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/transfer_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/file_and_decode.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dispatcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_file.cpp
)
