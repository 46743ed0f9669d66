# `cmake --install`: the mxsim CLI, the CPU libraries with their headers and a
# CMake package (find_package(mxsim) -> mxsim::numerics, mxsim::io,
# mxsim::trace, mxsim::data, mxsim::sim, mxsim::emu, mxsim::core), the Python
# package (python/CMakeLists.txt), man pages generated from --help by
# help2man, and bash completion. tests/downstream builds a project against
# the installed package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_libs mxsim_numerics mxsim_io mxsim_trace mxsim_data mxsim_sim mxsim_emu mxsim_core)
foreach(t ${_libs})
  string(REPLACE "mxsim_" "" _export ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${_export})
  add_library(mxsim::${_export} ALIAS ${t})
endforeach()
# The numerics contract for host code also holds in a consumer's translation
# units that inline mxsim's MXSIM_HD headers: no implicit FMA contraction.
target_compile_options(mxsim_numerics INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)

install(TARGETS mxsim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
install(TARGETS ${_libs} EXPORT mxsimTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/ ${PROJECT_SOURCE_DIR}/emu/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev FILES_MATCHING PATTERN "*.hpp")
set(_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/mxsim)
install(EXPORT mxsimTargets NAMESPACE mxsim:: DESTINATION ${_cmakedir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mxsimConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/mxsimConfig.cmake INSTALL_DESTINATION ${_cmakedir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mxsimConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mxsimConfig.cmake ${PROJECT_BINARY_DIR}/mxsimConfigVersion.cmake
        DESTINATION ${_cmakedir} COMPONENT dev)

# Man pages: mxsim(1) and mxsim-<command>(1), from the --help and --version the
# binary prints (so they never disagree with it).
find_program(HELP2MAN_EXECUTABLE help2man)
if(HELP2MAN_EXECUTABLE)
  set(_man ${PROJECT_BINARY_DIR}/man)
  set(_pages ${_man}/mxsim.1)
  add_custom_command(OUTPUT ${_man}/mxsim.1
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${_man}
                     COMMAND ${HELP2MAN_EXECUTABLE} --no-info --name "bit-exact low-precision training numerics"
                             --output ${_man}/mxsim.1 $<TARGET_FILE:mxsim>
                     DEPENDS mxsim VERBATIM)
  foreach(c cast compare dequantize gemm info launch quantize report train verify)
    add_custom_command(OUTPUT ${_man}/mxsim-${c}.1
                       COMMAND ${CMAKE_COMMAND} -E make_directory ${_man}
                       COMMAND ${HELP2MAN_EXECUTABLE} --no-info --no-discard-stderr --name "mxsim ${c}"
                               --help-option "${c} --help" --version-option --version
                               --output ${_man}/mxsim-${c}.1 $<TARGET_FILE:mxsim>
                       DEPENDS mxsim VERBATIM)
    list(APPEND _pages ${_man}/mxsim-${c}.1)
  endforeach()
  add_custom_target(mxsim_man ALL DEPENDS ${_pages})
  install(FILES ${_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT cli)
else()
  message(STATUS "mxsim man pages not generated (help2man not found)")
endif()

install(FILES ${PROJECT_SOURCE_DIR}/cli/completion/mxsim.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME mxsim COMPONENT cli)
