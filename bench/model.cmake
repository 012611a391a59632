add_executable(bench_model bench_model.c)
target_link_libraries(bench_model PRIVATE kgmodel)
