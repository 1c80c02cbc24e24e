# The installed variants of htp and the CMake package (docs/packaging.md).
#
#  - libhtp.a (htp_static): every object of htp_objects, plus the static CUDA runtime in a CUDA
#    build, prelinked into one relocatable object (ld -r) whose only global symbols are htp's
#    (objcopy --keep-global-symbol 'htp's mangled prefixes'), less htp::detail's
#    (--localize-symbol). The fmt, spdlog and nlohmann::json code compiled into htp, cudart and
#    htp's internals become local: an engine with its own copies links without One Definition
#    Rule clashes, and needs neither the CUDA toolkit nor those libraries.
#  - libhtp.so (htp_shared): the same objects, exports limited to htp's namespace less htp::detail
#    by cmake/htp.map; cudart linked in privately.
# A sanitizer build (HTP_SANITIZE) packages too: both variants are instrumented, and their usage
# requirements carry -fsanitize so that a consumer links the sanitizer runtime.
# Both are exported (htp::htp_static, htp::htp_shared); the package's htp::htp is the one
# BUILD_SHARED_LIBS chose, or the consumer's HTP_USE_SHARED.
include(CMakePackageConfigHelpers)

set(HTP_PACKAGE_DEFAULT_SHARED OFF)
if(BUILD_SHARED_LIBS)
  set(HTP_PACKAGE_DEFAULT_SHARED ON)
endif()

if(NOT HTP_PACKAGE)
  # Without the libraries an install would be headers that link to nothing: refuse it. (pip's
  # install of the Python component is unaffected: this is the default component.)
  install(CODE "message(FATAL_ERROR \"htp: this build has HTP_PACKAGE=OFF (a fuzz build, or set \"
                \"so): it builds no installable library. Configure with -DHTP_PACKAGE=ON to install.\")")
  return()
endif()

# The public headers only: include/htp/detail/ (the check macros, the CUDA backend's and the
# allocation registry's internals) is for htp's own sources, and no public header includes it.
install(DIRECTORY include/htp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        PATTERN detail EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/include/htp/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/htp)

set(htp_package_dir ${PROJECT_BINARY_DIR}/package)
set(htp_runtime_archives "")
set(htp_runtime_libs "")
if(HTP_WITH_CUDA)
  set(htp_runtime_archives $<TARGET_FILE:CUDA::cudart_static>)
  set(htp_runtime_libs rt)
endif()

# ---- libhtp.a: one prelinked object ---------------------------------------------------------------
set(htp_prelinked ${htp_package_dir}/htp_prelinked.o)
set(htp_keep "")
foreach(prefix _ZN3htp _ZNK3htp _ZTVN3htp _ZTIN3htp _ZTSN3htp _ZTTN3htp _ZThn*_N3htp _ZThn*_NK3htp
               _ZTv*_N3htp _ZTv*_NK3htp)
  list(APPEND htp_keep --keep-global-symbol=${prefix}* --localize-symbol=${prefix}6detail*)
endforeach()
add_custom_command(OUTPUT ${htp_prelinked}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${htp_package_dir}
  # --force-group-allocation dissolves COMDAT groups: a group whose signature symbol turned local
  # could otherwise still be discarded in favour of the consumer's copy of the same fmt template.
  COMMAND ${CMAKE_LINKER} -r --force-group-allocation -o ${htp_prelinked}.tmp
          $<TARGET_OBJECTS:htp_objects> ${htp_runtime_archives}
  COMMAND ${CMAKE_OBJCOPY} --wildcard ${htp_keep} ${htp_prelinked}.tmp ${htp_prelinked}
  COMMAND ${CMAKE_COMMAND} -E rm -f ${htp_prelinked}.tmp
  DEPENDS htp_objects $<TARGET_OBJECTS:htp_objects>
  COMMAND_EXPAND_LISTS VERBATIM
  COMMENT "Prelinking libhtp.a (only htp's symbols, less htp::detail's, stay global)")
set_source_files_properties(${htp_prelinked} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)

add_library(htp_static STATIC ${htp_prelinked})
set_target_properties(htp_static PROPERTIES OUTPUT_NAME htp EXPORT_NAME htp_static
  LINKER_LANGUAGE CXX ARCHIVE_OUTPUT_DIRECTORY ${htp_package_dir})
htp_public_usage(htp_static INTERFACE)
target_link_libraries(htp_static INTERFACE ${htp_runtime_libs})
if(HTP_SANITIZE)
  # Instrumented code needs the sanitizer's runtime in the consumer's link.
  target_link_options(htp_static INTERFACE -fsanitize=${HTP_SANITIZE})
endif()

# ---- libhtp.so ------------------------------------------------------------------------------------
add_library(htp_shared SHARED $<TARGET_OBJECTS:htp_objects>)
set_target_properties(htp_shared PROPERTIES OUTPUT_NAME htp EXPORT_NAME htp_shared
  LINKER_LANGUAGE CXX LIBRARY_OUTPUT_DIRECTORY ${htp_package_dir}
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/htp.map)
htp_public_usage(htp_shared PUBLIC)
target_link_options(htp_shared PRIVATE
  -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/htp.map -Wl,--exclude-libs,ALL
  -Wl,--no-undefined)
if(HTP_WITH_CUDA)
  target_link_libraries(htp_shared PRIVATE CUDA::cudart_static)
endif()
if(HTP_SANITIZE)
  # libhtp.so needs the sanitizer's runtime; the consumer's executable must load it first.
  target_link_options(htp_shared PUBLIC -fsanitize=${HTP_SANITIZE})
endif()

# ---- install ----------------------------------------------------------------------------------------
install(TARGETS htp_static htp_shared EXPORT htp-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# cmake --install --strip strips executables and shared libraries only; the archive too.
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
      \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:htp_static>\")
  endif()")
install(EXPORT htp-targets NAMESPACE htp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/htp)
configure_package_config_file(cmake/htp-config.cmake.in
  ${PROJECT_BINARY_DIR}/htp-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/htp)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/htp-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/htp-config.cmake ${PROJECT_BINARY_DIR}/htp-config-version.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/htp)
