# Tokenizer throughput (issue 3): bench/bench_tokenizer.sh runs it beside the references.
add_executable(bench_tokenizer bench_tokenizer.c)
target_link_libraries(bench_tokenizer PRIVATE kgtok PkgConfig::CJSON)
