# Every third-party dependency becomes an imported target here, so folders link by name only.
find_package(OpenMP REQUIRED COMPONENTS CXX)
# OpenBLAS's OpenMP build (libopenblas-openmp-dev): sgemm then shares our OpenMP thread pool.
# With the pthread build, its threads and our spinning OpenMP workers fight over 2 cores and a
# tiny model's step became up to 10x slower.
set(_blas_dir /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
find_library(PIPELANE_OPENBLAS_LIB openblas PATHS ${_blas_dir} NO_DEFAULT_PATH)
find_path(PIPELANE_OPENBLAS_INCLUDE cblas.h
          PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
if(NOT PIPELANE_OPENBLAS_LIB OR NOT PIPELANE_OPENBLAS_INCLUDE)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/setup.sh "
                      "(Debian package libopenblas-openmp-dev)")
endif()
add_library(pipelane_openblas INTERFACE)
target_include_directories(pipelane_openblas INTERFACE ${PIPELANE_OPENBLAS_INCLUDE})
target_link_libraries(pipelane_openblas INTERFACE ${PIPELANE_OPENBLAS_LIB})

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
find_package(PNG REQUIRED)  # imageproc lane (libpng-dev)
