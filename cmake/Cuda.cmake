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
    # register counts are printed with -DPIPELANE_CUDA_RESOURCE_USAGE=ON. -Werror all-warnings
    # also makes the host compiler's warnings in .cu files errors: PIPELANE_CUDA_WERROR=OFF
    # keeps them warnings, for a host compiler other than the g++ 12 this is tested with.
    option(PIPELANE_CUDA_WERROR "Make nvcc's and the host compiler's warnings in CUDA code errors" ON)
    add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xptxas --warn-on-spills>")
    if(PIPELANE_CUDA_WERROR)
      add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Werror all-warnings>")
    endif()
    option(PIPELANE_CUDA_RESOURCE_USAGE "Print registers and shared memory per CUDA kernel" OFF)
    if(PIPELANE_CUDA_RESOURCE_USAGE)
      add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:--resource-usage>)
    endif()
    find_package(CUDAToolkit REQUIRED)
    # cuDNN and NCCL beside the toolkit (Debian's and NVIDIA's packages) or in pip wheels
    # (nvidia-cudnn-cu13, nvidia-nccl-cu13: site-packages/nvidia/{cudnn,nccl}/{include,lib}, the
    # libraries as versioned sonames only), as the lent GPU machines have them.
    set(PIPELANE_CUDA_WHEEL_DIRS "" CACHE STRING "site-packages/nvidia/* folders searched for cuDNN and NCCL")
    if(NOT PIPELANE_CUDA_WHEEL_DIRS)
      find_program(PIPELANE_PYTHON3 python3)
      if(PIPELANE_PYTHON3)
        execute_process(
          COMMAND ${PIPELANE_PYTHON3} -c "import importlib.util as u\nfor m in ('nvidia.cudnn', 'nvidia.nccl'):\n  s = u.find_spec(m) if u.find_spec('nvidia') else None\n  print(';'.join(s.submodule_search_locations) if s else '')"
          OUTPUT_VARIABLE _wheels OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET TIMEOUT 30)
        string(REPLACE "\n" ";" _wheels "${_wheels}")
        list(REMOVE_ITEM _wheels "")
        set(PIPELANE_CUDA_WHEEL_DIRS "${_wheels}" CACHE STRING "site-packages/nvidia/* folders searched for cuDNN and NCCL" FORCE)
      endif()
    endif()
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
