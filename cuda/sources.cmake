# Sources of the cuda backend of the device layer (HTP_WITH_CUDA=ON): the device, its kernels
# (checksums, pattern fill, the weight codec's decode), interop with engines' CUDA objects, NVTX.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_device_work.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_capture.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels.cu
  ${CMAKE_CURRENT_LIST_DIR}/codec_kernels.cu
  ${CMAKE_CURRENT_LIST_DIR}/interop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nvtx.cpp
)
target_compile_definitions(htp_objects PRIVATE HTP_HAVE_CUDA=1)
# Headers only (cuda_runtime.h, nvtx3): the runtime is linked by each variant (CMakeLists.txt).
target_include_directories(htp_objects PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
