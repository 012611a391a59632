# Training benchmarks (issues 5, 35): bench_train (in-process shapes, threads, recompute),
# bench_train_mpi.sh (1 vs 2 ranks through kogpt2-train), bench_train_multihost.sh (namespace
# hosts on shaped links) with bench_allreduce (communication alone).
if(TARGET kogpt2-train)
  add_executable(bench_train bench_train.c)
  target_link_libraries(bench_train PRIVATE kgtrain)
endif()
# communication alone, for bench_train_multihost.sh (MPI builds)
if(TARGET kogpt2-train AND KG_TRAIN_MPI)
  add_executable(bench_allreduce bench_allreduce.c)
  target_link_libraries(bench_allreduce PRIVATE kgtrain)
endif()
