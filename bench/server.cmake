# kogpt2d under load (issue 4): build/bench_server starts build/kogpt2d and prints
# requests/s, p50/p99 and click latency. Never a pass/fail test.
if(TARGET kogpt2d)
  add_executable(bench_server bench_server.c)
  target_link_libraries(bench_server PRIVATE kgmodel Threads::Threads)
  add_dependencies(bench_server kogpt2d)
endif()
