# Installs htp from the build tree into a scratch prefix, then configures, builds and runs a tiny
# consumer project against it with find_package(htp) twice: against libhtp.a and against
# libhtp.so (HTP_USE_SHARED). The consumer side has no CUDA toolkit (find_package(CUDAToolkit) is
# disabled, and the link line must not name a CUDA library), no fmt and no spdlog. In a sanitizer
# build (HTP_SANITIZE) the package is instrumented: the consumer compiles with the same -fsanitize,
# as an engine testing under it would, and gets the runtime's link option from htp::htp.
# Run by ctest as `install_consumer`.
file(REMOVE_RECURSE ${HTP_WORK_DIR})
set(prefix ${HTP_WORK_DIR}/prefix)

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc})\n${out}\n${err}")
  endif()
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${HTP_BUILD_DIR} --prefix ${prefix})
foreach(file include/htp/version.hpp include/htp/cuda_interop.hpp lib/cmake/htp/htp-config.cmake
             lib/libhtp.a lib/libhtp.so)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "install_consumer: the install has no ${file}")
  endif()
endforeach()
# Public headers only, each complete: no include/htp/detail, and every <htp/...> an installed header
# includes is installed too.
if(EXISTS ${prefix}/include/htp/detail)
  message(FATAL_ERROR "install_consumer: the install has htp's private headers (include/htp/detail)")
endif()
file(GLOB installed_headers ${prefix}/include/htp/*.hpp)
foreach(header IN LISTS installed_headers)
  file(STRINGS ${header} includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]htp/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[^<\"]*[<\"](htp/[^>\"]+)[>\"].*$" "\\1" included "${line}")
    if(NOT EXISTS ${prefix}/include/${included})
      message(FATAL_ERROR "install_consumer: ${header} includes ${included}, which is not installed")
    endif()
  endforeach()
endforeach()
if(EXISTS ${HTP_BUILD_DIR}/tools/htp-plan AND NOT EXISTS ${prefix}/bin/htp-plan)
  message(FATAL_ERROR "install_consumer: htp-plan was built but not installed")
endif()

foreach(shared OFF ON)
  set(build ${HTP_WORK_DIR}/build-shared-${shared})
  run_step("configure (HTP_USE_SHARED=${shared})" ${CMAKE_COMMAND} -S ${HTP_CONSUMER_DIR} -B ${build}
           -G ${HTP_GENERATOR} -DCMAKE_CXX_COMPILER=${HTP_CXX_COMPILER}
           -DCMAKE_PREFIX_PATH=${prefix} -DHTP_USE_SHARED=${shared}
           -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON
           -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON)
  run_step("build (HTP_USE_SHARED=${shared})" ${CMAKE_COMMAND} --build ${build})
  file(GLOB_RECURSE link_rules ${build}/build.ninja ${build}/*/link.txt)
  foreach(rules IN LISTS link_rules)
    file(READ ${rules} text)
    if(text MATCHES "cudart|libcuda|/cuda[-/0-9.]*/|libfmt|libspdlog")
      string(REGEX MATCH "[^ ]*(cudart|libcuda|/cuda[-/0-9.]*/|libfmt|libspdlog)[^ ]*" what "${text}")
      message(FATAL_ERROR "install_consumer: the consumer's build names ${what}")
    endif()
  endforeach()
  run_step("run (HTP_USE_SHARED=${shared})" ${build}/htp_consumer)
  if(HTP_SANITIZE)
    # A sanitizer build's package: the consumer links the sanitizer's runtime through htp::htp.
    execute_process(COMMAND ${HTP_NM} ${build}/htp_consumer OUTPUT_VARIABLE consumer_symbols)
    execute_process(COMMAND ldd ${build}/htp_consumer OUTPUT_VARIABLE deps)
    if(NOT deps MATCHES "lib(tsan|asan|ubsan)" AND NOT consumer_symbols MATCHES " T __(tsan|asan|ubsan)_init")
      message(FATAL_ERROR "install_consumer: htp is built with -fsanitize=${HTP_SANITIZE} but the "
                          "consumer (HTP_USE_SHARED=${shared}) does not link a sanitizer runtime:\n${deps}")
    endif()
  endif()
  if(shared)
    execute_process(COMMAND ldd ${build}/htp_consumer OUTPUT_VARIABLE deps)
    if(NOT deps MATCHES "libhtp\\.so[^\n]*=> ${prefix}/lib")
      message(FATAL_ERROR "install_consumer: the shared consumer does not load the installed libhtp.so:\n${deps}")
    endif()
  endif()
endforeach()
message(STATUS "install_consumer: find_package(htp) from ${prefix} works, static and shared")
