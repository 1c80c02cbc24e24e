# Sources of compressed companions of safetensors files (include/htp/companion.hpp) and of the
# safetensors header reader (include/htp/safetensors.hpp), which share header_io.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/companion.cpp
  ${CMAKE_CURRENT_LIST_DIR}/header_io.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp
)
