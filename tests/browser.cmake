# Browser test of the Explorer (web/), issue 4: tests/browser/explorer.test.mjs drives Debian's
# Chromium (/usr/bin/chromium) with playwright-core. Setup: `apt-get install chromium` and
# `npm ci --ignore-scripts` in tests/browser. Without node, Chromium or node_modules, or when
# KG_SERVER_URL is set but unreachable, it exits 77 (skipped). Run: ctest -L browser
#
# The server it talks to: the built kogpt2d, on KG_BROWSER_MODEL_DIR or else on a small
# random model the browser_model fixture makes; without kogpt2d, KG_SERVER_URL from the
# environment, else the mock (tests/browser/mock_server.mjs, a fake daemon, for developing the
# page alone). Screenshots go to <build>/artifacts/.
find_program(KG_NODE NAMES node nodejs)
# Issue 17: the page's features are checked against the real daemon on the default model
# (models/default) when it is there; else the small random model below.
set(_browser_default "")
if(EXISTS "${CMAKE_SOURCE_DIR}/models/default/config.json")
  set(_browser_default "${CMAKE_SOURCE_DIR}/models/default")
endif()
set(KG_BROWSER_MODEL_DIR "${_browser_default}" CACHE PATH "model directory for kogpt2d in the browser test (empty: a small random model, or the mock without kogpt2d)")
set(_browser_env "KG_ARTIFACT_DIR=${CMAKE_BINARY_DIR}/artifacts")
# Without a model of one's own, the real daemon serves a small random model with the default
# model's tokenizer, made by a fixture (tests/test_server_lib.py make-model).
if(TARGET kogpt2d AND NOT KG_BROWSER_MODEL_DIR AND PYTHON3)
  set(_browser_model "${CMAKE_BINARY_DIR}/testdata/browser_model")
  kg_fixture(browser_model COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_lib.py
    make-model ${_browser_model} LABELS browser TIMEOUT 300)
  list(APPEND _browser_env "KG_DAEMON=$<TARGET_FILE:kogpt2d>" "KG_MODEL_DIR=${_browser_model}")
elseif(TARGET kogpt2d AND KG_BROWSER_MODEL_DIR)
  list(APPEND _browser_env "KG_DAEMON=$<TARGET_FILE:kogpt2d>" "KG_MODEL_DIR=${KG_BROWSER_MODEL_DIR}")
endif()
if(KG_NODE)
  add_test(NAME test_browser_explorer
    COMMAND ${KG_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/browser/explorer.test.mjs
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/browser)
else()
  add_test(NAME test_browser_explorer
    COMMAND ${CMAKE_COMMAND} -E echo "SKIP: node is not installed (test_browser_explorer)")
  set(_browser_skip_regex "SKIP: node")
endif()
set_tests_properties(test_browser_explorer PROPERTIES LABELS "browser" SKIP_RETURN_CODE 77
  TIMEOUT 300 ENVIRONMENT "${_browser_env}")
if(_browser_model)
  set_tests_properties(test_browser_explorer PROPERTIES FIXTURES_REQUIRED browser_model)
endif()
if(_browser_skip_regex)
  set_tests_properties(test_browser_explorer PROPERTIES SKIP_REGULAR_EXPRESSION "${_browser_skip_regex}")
endif()

# Issue 36: the Explorer's views of how the model reaches its guess (the lens grid, the attention
# marks) and the loose ends (a link ending in pending bytes, rank-bucket colours, the model
# picker's style), against the real daemon only (skips without one).
if(KG_NODE)
  add_test(NAME test_browser_explain
    COMMAND ${KG_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/browser/explain.test.mjs
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/browser)
  set_tests_properties(test_browser_explain PROPERTIES LABELS "browser" SKIP_RETURN_CODE 77
    TIMEOUT 300 ENVIRONMENT "${_browser_env}")
  if(_browser_model)
    set_tests_properties(test_browser_explain PROPERTIES FIXTURES_REQUIRED browser_model)
  endif()
endif()
