# MXSIM_SANITIZE=ON (the `asan` preset): every target built with AddressSanitizer and
# UndefinedBehaviorSanitizer, any report fatal (-fno-sanitize-recover), frame pointers kept for
# the reports' stacks. MXSIM_FUZZ=ON additionally instruments everything for libFuzzer's
# coverage feedback (-fsanitize=fuzzer-no-link) and builds the harnesses in fuzz/ (Clang only).
#
# Debian's libhdf5 is not instrumented: ASan sees neither its own accesses nor what it writes
# into our buffers. core/src/sanitize_hdf5_bounds.cpp wraps (ld --wrap) the HDF5 calls through
# which the library reads or writes caller memory and checks, from the ids' own types and
# dataspaces, that the whole range HDF5 will touch is addressable -- the link-time form of a
# preload shim, needing no LD_PRELOAD. It is linked into mxsim_trace in this build only.
option(MXSIM_SANITIZE "Build with AddressSanitizer + UndefinedBehaviorSanitizer" OFF)
option(MXSIM_FUZZ "Build the libFuzzer harnesses in fuzz/ (Clang; implies MXSIM_SANITIZE)" OFF)
if(MXSIM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MXSIM_FUZZ needs Clang (libFuzzer): configure with the asan preset or CXX=clang++")
  endif()
  set(MXSIM_SANITIZE ON CACHE BOOL "" FORCE)
endif()
if(MXSIM_SANITIZE)
  set(_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  if(MXSIM_FUZZ)
    list(APPEND _san -fsanitize=fuzzer-no-link)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_san}>")
  add_link_options(-fsanitize=address,undefined)
  # The HDF5 entry points the bounds shim wraps (see core/src/sanitize_hdf5_bounds.cpp).
  set(MXSIM_HDF5_WRAPPED H5Dread H5Dwrite H5Aread H5Awrite H5Sget_simple_extent_dims H5Screate_simple
      H5Sselect_hyperslab H5Dset_extent H5Pset_chunk H5Iget_name H5Pget_filter2)
endif()
