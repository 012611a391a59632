# Training gradient parity (issue 5). Included by tests/CMakeLists.txt, which defines kg_test().
#
# The fixture test gpt2_grad_testdata runs tests/ref/gpt2_grad_ref.py once per ctest run: it
# writes small random model dirs and their float64 PyTorch autograd gradients (checked there
# against a finite difference) into ${CMAKE_BINARY_DIR}/testdata/grad, and returns at once
# when they are already there for this version of the script (testdata/grad/STAMP).
# test_gpt2_grad requires the fixture and skips (77) when torch is missing.
if(NOT TARGET kgmodel)
  return()
endif()

set(KG_GRAD_TESTDATA "${CMAKE_BINARY_DIR}/testdata/grad")
if(PYTHON3)
  kg_fixture(gpt2_grad_testdata COMMAND ${PYTHON3} ${CMAKE_SOURCE_DIR}/tests/ref/gpt2_grad_ref.py
    ${KG_GRAD_TESTDATA} LABELS "model;parity;train" TIMEOUT 300)
endif()

kg_test(test_gpt2_grad SOURCES test_gpt2_grad.c LIBS kgmodel LABELS "model;parity;train"
  ARGS tied_tanh tied_erf odd_untied one_layer)
set_tests_properties(test_gpt2_grad PROPERTIES FIXTURES_REQUIRED gpt2_grad_testdata TIMEOUT 300)
