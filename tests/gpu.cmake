# CUDA backend tests (issue 8). Included by tests/CMakeLists.txt, which defines kg_test().
# Built wherever the CUDA backend is (KG_CUDA); without a usable GPU the test prints
# "SKIP: no CUDA device (...)" and exits 77, which ctest reports as skipped.
if(NOT KG_CUDA OR NOT TARGET kgmodel)
  return()
endif()

# libkgcuda.so opened only when asked for, its door and op table (issue 34 item 6): runs
# without a GPU too (opening the library needs only the CUDA runtime and cuBLAS to be there)
kg_test(test_cuda_load SOURCES test_cuda_load.c LIBS kgmodel LABELS gpu)
# every op against the CPU backend (tests/cuda_test.h: the tolerances); the whole model
kg_test(test_cuda_ops SOURCES test_cuda_ops.c LIBS kgmodel LABELS gpu)
kg_test(test_cuda_model SOURCES test_cuda_model.c LIBS kgmodel LABELS gpu)
get_test_property(test_cuda_ops ENVIRONMENT KG_CUDA_TEST_ENV)
# the whole model at the KoGPT2-base shape; an injected kernel fault in a process of its own
add_test(NAME test_cuda_kogpt2 COMMAND test_cuda_model kogpt2)
add_test(NAME test_cuda_fault COMMAND test_cuda_ops fault)
set_tests_properties(test_cuda_ops test_cuda_model test_cuda_kogpt2 test_cuda_fault PROPERTIES TIMEOUT 600
  SKIP_RETURN_CODE 77 LABELS gpu ENVIRONMENT "${KG_CUDA_TEST_ENV}")

# kogpt2d end to end on the GPU: the server tests with --device cuda (they skip without one)
if(TARGET kogpt2d AND PYTHON3)
  foreach(t ${KG_SERVER_E2E} abuse)
    add_test(NAME test_server_${t}_cuda COMMAND ${PYTHON3} ${CMAKE_SOURCE_DIR}/tests/test_server_${t}.py)
    set_tests_properties(test_server_${t}_cuda PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;server"
      TIMEOUT 600 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR};KG_TEST_DEVICE=cuda")
  endforeach()
endif()

# The backend library opened only when a GPU is asked for, end to end (issue 34 item 6): no
# program links the CUDA libraries; kogpt2d, kogpt2 and kogpt2-train on the CPU map none of
# them; --device cuda without a GPU and a missing or broken libkgcuda.so are clear errors.
# Two stand-ins for a libkgcuda.so of another build (tests/cuda_door_stub.c: another ABI, an
# op missing), which the loader must refuse.
if(TARGET kogpt2d AND PYTHON3)
  foreach(flaw ABI HOLE)
    string(TOLOWER ${flaw} _flaw)
    add_library(kgcuda_stub_${_flaw} MODULE cuda_door_stub.c)
    target_include_directories(kgcuda_stub_${_flaw} PRIVATE ${CMAKE_SOURCE_DIR})
    target_compile_definitions(kgcuda_stub_${_flaw} PRIVATE STUB_FLAW_${flaw})
    set_target_properties(kgcuda_stub_${_flaw} PROPERTIES C_VISIBILITY_PRESET hidden)
  endforeach()
  add_test(NAME test_server_device
    COMMAND ${PYTHON3} ${CMAKE_SOURCE_DIR}/tests/test_server_device.py)
  set_tests_properties(test_server_device PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;server"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR};KG_CUDA_STUB_ABI=$<TARGET_FILE:kgcuda_stub_abi>;KG_CUDA_STUB_HOLE=$<TARGET_FILE:kgcuda_stub_hole>")
endif()
