# Runs after gtest discovery in this directory: gives every test of test_integration the `mpi` label.
get_property(_tests DIRECTORY PROPERTY TESTS)
foreach(_t IN LISTS _tests)
  if(_t MATCHES "^test_integration\\.")
    set_tests_properties(${_t} PROPERTIES LABELS mpi RUN_SERIAL TRUE)
  endif()
endforeach()
