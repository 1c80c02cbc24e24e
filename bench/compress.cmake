# htp-compress: the compressed companion of a safetensors file (docs/pager.md, "Compressed weights").
add_executable(htp-compress compress/main.cpp)
target_link_libraries(htp-compress PRIVATE htp::htp CLI11::CLI11 htp_logging)
htp_target_warnings(htp-compress)
