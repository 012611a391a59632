add_executable(bench_model bench_model.c)
target_link_libraries(bench_model PRIVATE kgmodel)

# Load time of pytorch_model.bin vs model.safetensors (issue 14): bench/bench_load.py writes
# the KoGPT2-base-shape files with torch and runs this on both.
add_executable(bench_load bench_load.c)
target_link_libraries(bench_load PRIVATE kgmodel)
