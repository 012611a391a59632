# kogpt2d under load (issue 4): build/bench_server starts build/kogpt2d and prints
# requests/s, p50/p99 and click latency. Never a pass/fail test.
if(TARGET kogpt2d)
  add_executable(bench_server bench_server.c)
  target_link_libraries(bench_server PRIVATE kgmodel Threads::Threads)
  add_dependencies(bench_server kogpt2d)
endif()
# Serving streams (issue 34): inter-token gaps, chunked prefill, RSS against KV blocks, shared
# prompts, per-thread CPU; --kogpt2d runs another build's daemon in turns with this one.
if(TARGET kogpt2d)
  add_executable(bench_serving bench_serving.c)
  target_link_libraries(bench_serving PRIVATE kgmodel Threads::Threads m)
  add_dependencies(bench_serving kogpt2d)
endif()

# One load generator for kogpt2d and llama.cpp's server (issue 34 item 7): streamed
# completions and next-token at N clients against a running server; run by
# bench/bench_vs_llama_server.sh. Never a pass/fail test.
if(TARGET kgmodel)
  add_executable(bench_clients bench_clients.c)
  target_link_libraries(bench_clients PRIVATE kgmodel Threads::Threads)
endif()
