# Every third-party dependency becomes an imported target here, so folders link by name only.
find_package(OpenMP REQUIRED COMPONENTS CXX)
# OpenBLAS's OpenMP build (libopenblas-openmp-dev): sgemm then shares our OpenMP thread pool.
# With the pthread build, its threads and our spinning OpenMP workers fight over 2 cores and a
# tiny model's step became up to 10x slower.
set(_blas_dir /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
find_library(PIPELANE_OPENBLAS_LIB openblas PATHS ${_blas_dir} NO_DEFAULT_PATH)
find_path(PIPELANE_OPENBLAS_INCLUDE cblas.h
          PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
# Elsewhere (another distribution, a private prefix on CMAKE_PREFIX_PATH): any OpenBLAS, with a
# warning, since a pthread build slows small models down (above).
if(NOT PIPELANE_OPENBLAS_LIB OR NOT PIPELANE_OPENBLAS_INCLUDE)
  find_library(PIPELANE_OPENBLAS_LIB openblas)
  find_path(PIPELANE_OPENBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas)
  if(PIPELANE_OPENBLAS_LIB AND PIPELANE_OPENBLAS_INCLUDE)
    message(WARNING "OpenBLAS's OpenMP build not found; using ${PIPELANE_OPENBLAS_LIB}")
  endif()
endif()
if(NOT PIPELANE_OPENBLAS_LIB OR NOT PIPELANE_OPENBLAS_INCLUDE)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/setup.sh "
                      "(Debian package libopenblas-openmp-dev)")
endif()
add_library(pipelane_openblas INTERFACE)
target_include_directories(pipelane_openblas INTERFACE ${PIPELANE_OPENBLAS_INCLUDE})
target_link_libraries(pipelane_openblas INTERFACE ${PIPELANE_OPENBLAS_LIB})

# oneDNN (libdnnl-dev): the CPU backend's bf16 GEMMs (runtime/cpu/onednn_bf16_gemm.h). Debian's
# build uses the OpenMP runtime, so its kernels share our OpenMP threads as sgemm's do. Found by
# header and library rather than its CMake package, which also asks for OpenCL.
find_path(PIPELANE_ONEDNN_INCLUDE oneapi/dnnl/dnnl.hpp)
find_library(PIPELANE_ONEDNN_LIB dnnl)
if(NOT PIPELANE_ONEDNN_INCLUDE OR NOT PIPELANE_ONEDNN_LIB)
  message(FATAL_ERROR "oneDNN not found: run scripts/setup.sh (Debian package libdnnl-dev)")
endif()
add_library(pipelane_onednn INTERFACE)
target_include_directories(pipelane_onednn INTERFACE ${PIPELANE_ONEDNN_INCLUDE})
target_link_libraries(pipelane_onednn INTERFACE ${PIPELANE_ONEDNN_LIB})

find_package(HDF5 REQUIRED COMPONENTS C)
add_library(pipelane_hdf5 INTERFACE)
target_include_directories(pipelane_hdf5 INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_link_libraries(pipelane_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_compile_definitions(pipelane_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})

find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(nlohmann_json 3 REQUIRED)
find_package(GTest REQUIRED)
include(GoogleTest)
find_package(ZLIB REQUIRED)
# ICU's NFC (libicu-dev) for tokenizer.json files that normalize (Qwen2).
find_package(ICU REQUIRED COMPONENTS uc)
add_library(pipelane_icu INTERFACE)
target_link_libraries(pipelane_icu INTERFACE ICU::uc)
# SentencePiece (libsentencepiece-dev) for spm:PATH.model tokenizers (Llama 2, Mistral).
find_path(PIPELANE_SENTENCEPIECE_INCLUDE sentencepiece_processor.h)
find_library(PIPELANE_SENTENCEPIECE_LIB sentencepiece)
if(NOT PIPELANE_SENTENCEPIECE_INCLUDE OR NOT PIPELANE_SENTENCEPIECE_LIB)
  message(FATAL_ERROR "SentencePiece not found: run scripts/setup.sh (Debian package libsentencepiece-dev)")
endif()
add_library(pipelane_sentencepiece INTERFACE)
target_include_directories(pipelane_sentencepiece INTERFACE ${PIPELANE_SENTENCEPIECE_INCLUDE})
target_link_libraries(pipelane_sentencepiece INTERFACE ${PIPELANE_SENTENCEPIECE_LIB})
# libseccomp (libseccomp-dev): the system-call filter of lane workers (lanes/isolation/lane_seccomp.h).
find_path(PIPELANE_SECCOMP_INCLUDE seccomp.h)
find_library(PIPELANE_SECCOMP_LIB seccomp)
if(NOT PIPELANE_SECCOMP_INCLUDE OR NOT PIPELANE_SECCOMP_LIB)
  message(FATAL_ERROR "libseccomp not found: run scripts/setup.sh (Debian package libseccomp-dev)")
endif()
add_library(pipelane_seccomp INTERFACE)
target_include_directories(pipelane_seccomp INTERFACE ${PIPELANE_SECCOMP_INCLUDE})
target_link_libraries(pipelane_seccomp INTERFACE ${PIPELANE_SECCOMP_LIB})
find_package(PNG REQUIRED)  # imageproc lane (libpng-dev)
find_package(JPEG REQUIRED)  # jpegimage lane (libjpeg62-turbo-dev)
