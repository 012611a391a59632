add_executable(bench_model bench_model.c)
target_link_libraries(bench_model PRIVATE kgmodel)

# Load time of pytorch_model.bin vs model.safetensors (issue 14): bench/bench_load.py writes
# the KoGPT2-base-shape files with torch and runs this on both.
add_executable(bench_load bench_load.c)
target_link_libraries(bench_load PRIVATE kgmodel)

# Quality of q8_0/q4_0 weights (issue 16): bits per byte on real text and the Explorer's
# top-10 next to f32, all dtypes in one run (see the file's header for the texts).
add_executable(bench_quant_quality bench_quant_quality.c)
target_link_libraries(bench_quant_quality PRIVATE kgmodel kgtok)
# Its --check as a test (not timing: quality): q8_0 within 1 % of f32's bits per byte and
# q4_0 within 5 % on the start of the default model's held-out text (tests/data/).
set(_quant_env KG_SOURCE_DIR=${CMAKE_SOURCE_DIR} KG_BUILD_DIR=${CMAKE_BINARY_DIR})
add_test(NAME test_gpt2_quant_quality
  COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_gpt2_quant_quality.sh)
set_tests_properties(test_gpt2_quant_quality PROPERTIES SKIP_RETURN_CODE 77 LABELS model
  TIMEOUT 300 ENVIRONMENT "${_quant_env}")

# What the lens and the attention view add to a next-token answer, in the model alone (issue
# 36); bench/bench_explain.py measures the daemon end to end.
add_executable(bench_explain bench_explain.c)
target_link_libraries(bench_explain PRIVATE kgmodel)
