# Warnings for htp's own targets: -Wall -Wextra -Wpedantic, and -Werror when HTP_WERROR is on.
function(htp_target_warnings target)
  set(flags -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
  if(HTP_WERROR)
    list(APPEND flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${flags}>)
  # nvcc forwards host warnings with -Xcompiler; keep device code quiet on system headers.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endfunction()
