# CUDA backend tests (issue 8). Included by tests/CMakeLists.txt, which defines kg_test().
# Built wherever the CUDA backend is (KG_CUDA); without a usable GPU the test prints
# "SKIP: no CUDA device (...)" and exits 77, which ctest reports as skipped.
if(NOT KG_CUDA OR NOT TARGET kgmodel)
  return()
endif()

kg_test(test_cuda_ops SOURCES test_cuda_ops.c LIBS kgmodel LABELS gpu)
set_tests_properties(test_cuda_ops PROPERTIES TIMEOUT 600)
