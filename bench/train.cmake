# Training benchmarks (issue 5): bench_train (in-process shapes, threads, recompute) and
# bench_train_mpi.sh (1 vs 2 ranks through kogpt2-train).
if(TARGET kogpt2-train)
  add_executable(bench_train bench_train.c)
  target_link_libraries(bench_train PRIVATE kgtrain)
endif()
