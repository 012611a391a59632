# kogpt2d tests (issue 4). Included by tests/CMakeLists.txt, which defines kg_test().
#
# test_server_http: the HTTP layer alone (its own route table, no model): JSON getters,
#   static-file paths, metrics text, replies, body limits, suspend/resume, SSE, handlers on
#   the work pool (a full queue is a 503, a GET is answered meanwhile).
# test_server_encode: tok_encode_max and its byte bound on the three tokenizers.
# test_server_e2e: build/kogpt2d on 127.0.0.1 with a small random model and the shared v2
#   tokenizer: every endpoint and every bad-input class; skips (77) without ../shared.
# test_server_abuse: the limits under abuse (issues 7, 24): a 64-client soak with 10 % bad
#   requests (KG_SERVER_SOAK_S, default 5 s), 200 slow-drip connections beside 8 normal clients,
#   --max-connections overflow (503), memory per request; megabyte bodies to every endpoint that
#   tokenizes (422 naming the limit, /healthz answered meanwhile, RSS given back), usage counts,
#   a chat template's work budget, 600 dripping connections beside a client from 127.0.0.2;
#   about 70 s.
if(NOT TARGET kghttp)
  return()
endif()

kg_test(test_server_http SOURCES test_server_http.c LIBS kghttp LABELS server)
set_tests_properties(test_server_http PROPERTIES TIMEOUT 60)
# the encode limit every prompt goes through (issue 24): tok_encode_max = encode + count,
# its byte bound never refuses a text that fits, and it stops early
kg_test(test_server_encode SOURCES test_server_encode.c LIBS kgtok LABELS server)
set_tests_properties(test_server_encode PROPERTIES TIMEOUT 120)
# the chat-template interpreter alone, against jinja2's renderings (cJSON reads the vectors)
kg_test(test_chat_template SOURCES test_chat_template.c LIBS kgchattemplate PkgConfig::CJSON
  LABELS server)

if(TARGET kogpt2d AND PYTHON3)
  add_test(NAME test_server_e2e COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_e2e.py)
  set_tests_properties(test_server_e2e PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 600 ENVIRONMENT "KG_SHARED_DIR=${KG_SHARED_DIR};KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # an operator's kogpt2d (issue 29): request ids, API keys, --version, KOGPT2_* variables,
  # --log-format json, kogpt2_build_info
  add_test(NAME test_server_ops COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_ops.py)
  set_tests_properties(test_server_ops PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_SHARED_DIR=${KG_SHARED_DIR};KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  add_test(NAME test_server_abuse
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_abuse.py)
  # no U+FFFD from any sampling endpoint on the default model with utf8_strict (issue 26)
  add_test(NAME test_server_utf8 COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_utf8.py)
  set_tests_properties(test_server_utf8 PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 600 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # /v1/score's ranks and top_alternatives vs `kogpt2 next --top-k V` (issue 26 item 12)
  add_test(NAME test_server_score COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_score.py)
  set_tests_properties(test_server_score PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # /v1/next-token's explain (issue 36 items 1, 2): the lens and the attention view on the
  # default model against a hand-written torch GPT-2 (tests/ref/explain_ref.py)
  add_test(NAME test_server_explain
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_explain.py)
  set_tests_properties(test_server_explain PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e;parity"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # the top logprob lists' tokens (issue 36 item 4): a byte-fallback candidate as its text or
  # OpenAI's "bytes:\xNN", never its <0xNN> piece (completions, generate, TGI, chat)
  add_test(NAME test_server_logprobs
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_logprobs.py)
  set_tests_properties(test_server_logprobs PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # TGI's compat route POST / (issue 36 item 4): /generate's and /generate_stream's answers
  # there, GET / still the Explorer
  add_test(NAME test_server_tgi COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_tgi.py)
  set_tests_properties(test_server_tgi PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # several models in one daemon (issue 26 item 13): routing by "model", /v1/models, 404s,
  # streams on the second model, a single model's answers unchanged
  add_test(NAME test_server_models
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_models.py)
  set_tests_properties(test_server_models PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_SHARED_DIR=${KG_SHARED_DIR};KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # the README's curl examples, as printed, on the default model (issue 15)
  add_test(NAME test_readme_examples
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_readme_examples.py)
  set_tests_properties(test_readme_examples PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  set_tests_properties(test_server_abuse PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_SHARED_DIR=${KG_SHARED_DIR};KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
endif()
