# htp-compress: the compressed companion of a safetensors file (docs/pager.md, "Compressed weights").
add_library(htp_companion STATIC compress/companion.cpp)
target_include_directories(htp_companion PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(htp_companion PUBLIC htp::htp PRIVATE nlohmann_json::nlohmann_json)
htp_target_warnings(htp_companion)
add_executable(htp-compress compress/main.cpp)
target_link_libraries(htp-compress PRIVATE htp_companion CLI11::CLI11 htp_logging)
htp_target_warnings(htp-compress)
