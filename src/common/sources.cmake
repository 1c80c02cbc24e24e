# What every layer uses, depending on no layer: errors and the message formatting behind
# HTP_EXPECTS, checksums, logging, the version, whether another process still runs. Its private
# headers (log.hpp, nvtx_range.hpp, process_liveness.hpp) are included by name ("log.hpp") from any
# module: src/common is on htp_objects' include path.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checksum.cpp
  ${CMAKE_CURRENT_LIST_DIR}/log.cpp
  ${CMAKE_CURRENT_LIST_DIR}/process_liveness.cpp
  ${CMAKE_CURRENT_LIST_DIR}/version.cpp
)
target_include_directories(htp_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR})
