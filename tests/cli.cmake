# The kogpt2 command line (issues 26, 29), on the project's default model: tests/test_cli.py,
# one mode per feature. Included by tests/CMakeLists.txt.
#
# test_cli_generate: streamed text = --json text, --seed determinism, stop strings, penalties,
#   --max-tokens, n_ctx, end-of-text and --ignore-eos.
# test_cli_generate_server: kogpt2 generate = kogpt2d's /v1/generate (greedy, and seeded
#   sampling with top-k/top-p/penalties and stop strings) on the same prompts.
# test_cli_convert_progress: kogpt2 convert's progress off a terminal (a line per 10 %) and on
#   one (a pty: one redrawn line with an ETA).
# test_cli_version, test_cli_tokenize_default, test_cli_errors, test_cli_next_plain: --version
#   everywhere; tokenize's default tokenizer and "tokens"; every usage error named on the first
#   line; next's candidates as JSON strings.
# test_readme_cli_examples: the README's "Command line" block, run as printed.
if(NOT TARGET kogpt2 OR NOT PYTHON3)
  return()
endif()

set(_cli_env "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
foreach(_mode generate progress version tokenize errors next)
  set(_name test_cli_${_mode})
  if(_mode STREQUAL "progress")
    set(_name test_cli_convert_progress)
  elseif(_mode STREQUAL "tokenize")
    set(_name test_cli_tokenize_default)
  elseif(_mode STREQUAL "next")
    set(_name test_cli_next_plain)
  endif()
  add_test(NAME ${_name} COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.py ${_mode})
  set_tests_properties(${_name} PROPERTIES SKIP_RETURN_CODE 77 LABELS cli TIMEOUT 300
    ENVIRONMENT "${_cli_env}")
endforeach()

if(TARGET kogpt2d)
  add_test(NAME test_cli_generate_server
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.py server)
  set_tests_properties(test_cli_generate_server PROPERTIES SKIP_RETURN_CODE 77
    LABELS "cli;server;e2e" TIMEOUT 300 ENVIRONMENT "${_cli_env}")
endif()

# the README's "Command line" examples, run as printed on the default model
add_test(NAME test_readme_cli_examples
  COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_readme_examples.py cli)
set_tests_properties(test_readme_cli_examples PROPERTIES SKIP_RETURN_CODE 77 LABELS cli
  TIMEOUT 300 ENVIRONMENT "${_cli_env}")

# kogpt2 score (issue 36 item 3): per line, models/eval_bpb.sh's figures and /v1/score's summed
# logprob; skipped lines in place; JSONL, stdin and batching give the same figures
if(TARGET kogpt2d AND TARGET kogpt2-train)
  add_test(NAME test_cli_score COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_score.py)
  set_tests_properties(test_cli_score PROPERTIES SKIP_RETURN_CODE 77 LABELS "cli;server;e2e"
    TIMEOUT 600 ENVIRONMENT "${_cli_env}")
endif()
# bytes with a NUL in them (issue 32 item 2's class): tokenize --jsonl's "\u0000" line, a
# Hugging Face ref holding a NUL
add_test(NAME test_cli_nul COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_nul.py)
set_tests_properties(test_cli_nul PROPERTIES SKIP_RETURN_CODE 77 LABELS cli TIMEOUT 120
  ENVIRONMENT "${_cli_env}")
