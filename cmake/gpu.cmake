# GPU backend selection: MXSIM_GPU = auto | nvidia | amd | off.
#   nvidia: HIP sources compiled as CUDA by nvcc through backends/hip/vendors/cuda.h
#   amd:    HIP sources compiled by ROCm's hipcc (Debian HIP 5.2)
#   auto:   nvidia if a CUDA compiler is found, else amd if hipcc is, else off.
set(MXSIM_GPU_PLATFORM "off")
if(MXSIM_GPU STREQUAL "auto" OR MXSIM_GPU STREQUAL "nvidia")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(MXSIM_GPU_PLATFORM "nvidia")
  elseif(MXSIM_GPU STREQUAL "nvidia")
    message(FATAL_ERROR "MXSIM_GPU=nvidia but no CUDA compiler (nvcc) was found")
  endif()
endif()
if(MXSIM_GPU_PLATFORM STREQUAL "off" AND (MXSIM_GPU STREQUAL "auto" OR MXSIM_GPU STREQUAL "amd"))
  find_program(MXSIM_HIPCC hipcc)
  if(MXSIM_HIPCC)
    set(MXSIM_GPU_PLATFORM "amd")
  elseif(MXSIM_GPU STREQUAL "amd")
    message(FATAL_ERROR "MXSIM_GPU=amd but hipcc was not found")
  endif()
endif()
# CUDA is enabled here, at the top directory's scope, because every target
# that links mxsim_hip (tests, cli) uses it indirectly. Default target: Hopper
# sm_90a (H100/H200), the device machine's GPU; override with
# -DCMAKE_CUDA_ARCHITECTURES=...
if(MXSIM_GPU_PLATFORM STREQUAL "nvidia")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90a)
  endif()
  enable_language(CUDA)
  # Debian 12's CMake 3.25.1 FindCUDAToolkit marks CUDA::nvToolsExt deprecated
  # when the project requires CMake >= 3.25, without checking that the target
  # exists; CUDA 13 ships no libnvToolsExt, so the stock module stops the
  # configure with "set_property could not find TARGET CUDA::nvToolsExt".
  # Later CMake releases check first. The module reads the minimum version
  # only for that warning, so it sees an older one for this call.
  set(_mxsim_min_version ${CMAKE_MINIMUM_REQUIRED_VERSION})
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  find_package(CUDAToolkit REQUIRED GLOBAL)
  set(CMAKE_MINIMUM_REQUIRED_VERSION ${_mxsim_min_version})
  # CMake 3.25 knows no C++20 flag for nvcc 13; targets inherit cxx_std_20
  # through their dependencies, so tell it the flag.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()
message(STATUS "mxsim GPU backend: ${MXSIM_GPU_PLATFORM} (MXSIM_GPU=${MXSIM_GPU})")
if(NOT MXSIM_GPU_PLATFORM STREQUAL "off" AND EXISTS ${CMAKE_SOURCE_DIR}/backends/hip/CMakeLists.txt)
  add_subdirectory(backends/hip)
endif()
# The Backend implementation of the GPU (mxsim::hip::make_backend, declared in
# backends/hip/include/mxsim/hip/backend_hip.hpp): `mxsim verify --backend hip`
# and tests/test_gpu_backend.cpp need it.
set(MXSIM_HAVE_HIP_BACKEND OFF)
if(TARGET mxsim_hip)
  set(MXSIM_HAVE_HIP_BACKEND ON)
endif()
message(STATUS "mxsim GPU Backend (mxsim::hip::make_backend): ${MXSIM_HAVE_HIP_BACKEND}")
