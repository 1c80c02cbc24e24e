# Sources of compressed companions of safetensors files (include/htp/companion.hpp).
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/companion.cpp
)
