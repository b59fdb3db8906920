# Resolves PIPELANE_CUDA (AUTO|ON|OFF) into:
# - PIPELANE_HAVE_CUDA: nvcc found, the CUDA language enabled, the CUDA libraries built;
# - PIPELANE_CUDA_HEADERS: the toolkit's include directory when its headers exist (even without
#   nvcc), which is all the emulated kernel tests need (cuda_bf16.h, driver_types.h).
# Nothing links libcuda: the runtime API is resolved through libcudart, which reports "no device"
# cleanly on a machine without a driver. The architectures (80;90) are set before project().
string(TOUPPER "${PIPELANE_CUDA}" _cuda_mode)
set(PIPELANE_HAVE_CUDA OFF)
set(PIPELANE_CUDA_HEADERS "")
if(_cuda_mode STREQUAL "OFF")
  message(STATUS "pipelane: CUDA backend off (PIPELANE_CUDA=OFF)")
else()
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc 13's C++20 flag (it compiles CUDA as C++17 or refuses): tell it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # Register spills are build errors (a spilling kernel is a performance bug); the kernels'
    # register counts are printed with -DPIPELANE_CUDA_RESOURCE_USAGE=ON.
    add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xptxas --warn-on-spills>"
                        "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Werror all-warnings>")
    option(PIPELANE_CUDA_RESOURCE_USAGE "Print registers and shared memory per CUDA kernel" OFF)
    if(PIPELANE_CUDA_RESOURCE_USAGE)
      add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:--resource-usage>)
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(PIPELANE_HAVE_CUDA ON)
    message(STATUS "pipelane: CUDA backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, arch ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "PIPELANE_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    find_package(CUDAToolkit QUIET)
    message(STATUS "pipelane: CUDA backend off (no nvcc found)")
  endif()
  if(CUDAToolkit_FOUND AND EXISTS "${CUDAToolkit_INCLUDE_DIRS}/cuda_bf16.h")
    set(PIPELANE_CUDA_HEADERS "${CUDAToolkit_INCLUDE_DIRS}")
  endif()
endif()
