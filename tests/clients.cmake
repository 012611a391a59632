# Client suite of kogpt2d (issue 15): tests/clients/run.mjs starts the built kogpt2d (with
# --api-key and --cors-origin) on a small model and drives it with client libraries nobody here
# wrote: the official openai Node SDK, the same SDK in Debian's Chromium (playwright-core),
# LangChain's OpenAI and ChatOpenAI, and promtool (Debian's prometheus package) on /metrics.
# Setup: `npm ci --ignore-scripts` in tests/clients (scripts/deps.sh does it). Without node,
# node_modules or kogpt2d it is skipped (77); without Chromium or promtool those checks are
# skipped and the rest run. Run: ctest -L clients (about 10 s; kogpt2d's log goes to
# <build>/artifacts/test_clients-kogpt2d.log).
if(NOT TARGET kogpt2d)
  return()
endif()
find_program(KG_NODE NAMES node nodejs)
# The default model is real (Korean text, greedy loops the penalty checks need) and needs no
# ../shared; another directory can be named here.
set(KG_CLIENTS_MODEL_DIR "${CMAKE_SOURCE_DIR}/models/default" CACHE PATH "model directory kogpt2d serves in test_clients")
if(KG_NODE)
  add_test(NAME test_clients COMMAND ${KG_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/clients/run.mjs
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/clients)
else()
  add_test(NAME test_clients
    COMMAND ${CMAKE_COMMAND} -E echo "SKIP: node is not installed (test_clients)")
  set_tests_properties(test_clients PROPERTIES SKIP_REGULAR_EXPRESSION "SKIP: node")
endif()
set_tests_properties(test_clients PROPERTIES LABELS "server;clients" SKIP_RETURN_CODE 77
  TIMEOUT 180 PROCESSORS 2 ENVIRONMENT
  "KG_DAEMON=$<TARGET_FILE:kogpt2d>;KG_MODEL_DIR=${KG_CLIENTS_MODEL_DIR};KG_ARTIFACT_DIR=${CMAKE_BINARY_DIR}/artifacts")
