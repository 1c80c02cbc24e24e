# Installs htp from the build tree into a scratch prefix, then configures, builds and runs a tiny
# consumer project against it with find_package(htp). Run by ctest as `install_consumer`.
file(REMOVE_RECURSE ${HTP_WORK_DIR})
set(prefix ${HTP_WORK_DIR}/prefix)

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc})\n${out}\n${err}")
  endif()
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${HTP_BUILD_DIR} --prefix ${prefix})
run_step("configure" ${CMAKE_COMMAND} -S ${HTP_CONSUMER_DIR} -B ${HTP_WORK_DIR}/build
         -G ${HTP_GENERATOR} -DCMAKE_PREFIX_PATH=${prefix})
run_step("build" ${CMAKE_COMMAND} --build ${HTP_WORK_DIR}/build)
run_step("run" ${HTP_WORK_DIR}/build/htp_consumer)
message(STATUS "install_consumer: find_package(htp) from ${prefix} works")
