# Build time and memory on small machines (the README's quick start runs on 2
# cores): compiles through ccache when it is installed, and link jobs capped
# by memory so a parallel build does not run out of it.

# ccache, unless a launcher was chosen on the command line. CCACHE_BASEDIR
# makes the source tree's absolute paths relative in ccache's hash, so a
# fresh clone elsewhere (CI clones the submission anew on the same machine)
# hits the objects an earlier clone compiled; CCACHE_NOHASHDIR does the same
# for the working directory of -g builds (the sanitizer preset). ccache
# checks the compiler, its flags and every header read, so a hit is the
# object the compile would give.
option(MXSIM_CCACHE "Compile through ccache when it is installed" ON)
if(MXSIM_CCACHE)
  find_program(MXSIM_CCACHE_PROGRAM ccache)
  if(MXSIM_CCACHE_PROGRAM)
    set(_launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=true
                  ${MXSIM_CCACHE_PROGRAM})
    foreach(lang C CXX CUDA)
      if(NOT CMAKE_${lang}_COMPILER_LAUNCHER)
        set(CMAKE_${lang}_COMPILER_LAUNCHER ${_launcher})
      endif()
    endforeach()
    message(STATUS "mxsim: compiling through ${MXSIM_CCACHE_PROGRAM}")
  endif()
endif()

# Ninja link pool: one link job per 3 GiB of memory (at least one), so a
# small machine links the ~100 test binaries and the Python module a few at
# a time while compiles keep the full -j.
cmake_host_system_information(RESULT _mem_mib QUERY TOTAL_PHYSICAL_MEMORY)
math(EXPR _links "${_mem_mib} / 3072")
if(_links LESS 1)
  set(_links 1)
endif()
set_property(GLOBAL APPEND PROPERTY JOB_POOLS mxsim_link=${_links})
set(CMAKE_JOB_POOL_LINK mxsim_link)
