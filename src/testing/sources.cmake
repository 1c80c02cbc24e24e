# Test seams shipped with the library: the fault-injecting device wrapper.
target_sources(htp_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/fault_injecting_device.cpp
)
