# Every third-party dependency becomes an imported target here, so folders link by name only.
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(OpenBLAS CONFIG REQUIRED)
add_library(pipelane_openblas INTERFACE)
target_include_directories(pipelane_openblas INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(pipelane_openblas INTERFACE ${OpenBLAS_LIBRARIES})

find_package(HDF5 REQUIRED COMPONENTS C)
add_library(pipelane_hdf5 INTERFACE)
target_include_directories(pipelane_hdf5 INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_link_libraries(pipelane_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_compile_definitions(pipelane_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})

find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(nlohmann_json 3 REQUIRED)
find_package(GTest REQUIRED)
include(GoogleTest)
