# Sources of the device layer (include/htp/device.hpp): make_device and the backend choice, the
# allocation registry both backends keep, and, in a build without the CUDA toolkit, the stand-ins
# for the cuda backend (no_cuda.cpp; with the toolkit, cuda/sources.cmake builds the real one).
# The sim backend is src/sim/, the fault-injecting wrapper src/testing/.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/allocation_registry.cpp
)
if(NOT HTP_WITH_CUDA)
  target_sources(htp_objects PRIVATE ${CMAKE_CURRENT_LIST_DIR}/no_cuda.cpp)
endif()
