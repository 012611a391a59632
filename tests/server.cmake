# kogpt2d tests (issue 4). Included by tests/CMakeLists.txt, which defines kg_test().
#
# test_server_http: the HTTP layer alone (its own route table, no model): JSON getters,
#   static-file paths, metrics text, replies, body limits, suspend/resume, SSE, handlers on
#   the work pool (a full queue is a 503, a GET is answered meanwhile).
# test_server_admit: connection admission's decision and table (server/http/admit.h).
# test_server_encode: tok_encode_max and its byte bound on the three tokenizers.
# test_server_<family> (KG_SERVER_E2E below): build/kogpt2d on 127.0.0.1, one script per
#   endpoint family as llama.cpp's tools/server/tests/unit/test_<endpoint>.py are (issue 33
#   item 6), each over tests/test_server_lib.py (a small random model with the tokenizer the
#   project ships, one daemon per script, one run/report loop); each script's docstring says
#   what it checks. They need nothing from ../shared.
# test_server_abuse: the limits under abuse (issues 7, 24): a 64-client soak with 10 % bad
#   requests (KG_SERVER_SOAK_S, default 5 s), 200 slow-drip connections beside 8 normal clients,
#   --max-connections overflow (503), memory per request; megabyte bodies to every endpoint that
#   tokenizes (422 naming the limit, /healthz answered meanwhile, RSS given back), usage counts,
#   a chat template's work budget, 600 dripping connections beside a client from 127.0.0.2;
#   about 70 s.
# test_server_flags: kogpt2d's flags and KOGPT2_* variables as an operator gets them wrong
#   (empty keys, a missing model or template named by its variable, bad variables beside
#   their flags), --help's variables, a daemon of two named models exiting 0 (under ASan:
#   LeakSanitizer quiet); on models/default, ~3 s (25 s under ASan).
if(NOT TARGET kghttp)
  return()
endif()

kg_test(test_server_http SOURCES test_server_http.c LIBS kghttp LABELS server)
set_tests_properties(test_server_http PROPERTIES TIMEOUT 60)
# connection admission (issue 32 item 6, issue 33 item 2): the admit / refuse / cut decision
# over its cases and every count of small limits, and its table over a client's sequential
# connections (none refused) and the per-address limit (exactly its count); no sockets
kg_test(test_server_admit SOURCES test_server_admit.c LIBS kghttp LABELS server)
# the encode limit every prompt goes through (issue 24): tok_encode_max = encode + count,
# its byte bound never refuses a text that fits, and it stops early
kg_test(test_server_encode SOURCES test_server_encode.c LIBS kgtok LABELS server)
set_tests_properties(test_server_encode PROPERTIES TIMEOUT 120)
# the parts of the transport and the API that only the daemon reached before (issue 33 item 6):
# the work pool's bound and stop, the API keys, the request field tables, messages into a
# chat prompt (the default model's tokenizer, ids from libsentencepiece)
kg_test(test_server_workpool SOURCES test_server_workpool.c LIBS kghttp LABELS server)
set_tests_properties(test_server_workpool PROPERTIES TIMEOUT 60)
kg_test(test_server_auth SOURCES test_server_auth.c LIBS kghttp LABELS server)
if(TARGET kgapi)
  kg_test(test_server_params SOURCES test_server_params.c LIBS kgapi PkgConfig::CJSON
    LABELS server)
  kg_test(test_server_chat_prompt SOURCES test_server_chat_prompt.c LIBS kgapi PkgConfig::CJSON
    LABELS server)
endif()
# the chat-template interpreter alone, against jinja2's renderings (cJSON reads the vectors)
kg_test(test_chat_template SOURCES test_chat_template.c LIBS kgchattemplate PkgConfig::CJSON
  LABELS server)

# health: /healthz, /readyz, /v1/models, /metrics; tokenize: /v1/tokenize, /v1/detokenize, NUL
# bytes, a short tokenizer; next_token: /v1/next-token, --precision bf16, concurrent clients;
# generate: /v1/generate, streams, hang-ups, half-closes; completions, chat (with chat
# templates), responses: OpenAI's; tgi_sagemaker: TGI's and SageMaker's routes; score: /v1/score
# vs /v1/next-token, and its ranks vs `kogpt2 next --top-k V` on the default model (issue 26
# item 12); bad_input: every bad body class; transport: static files, bad HTTP, framing,
# slowloris; lifecycle: a busy port, SIGTERM and SIGHUP, a model file truncated while served;
# auth_cors: API keys, CORS, 429; explain: /v1/next-token's lens and attention view on the
# default model against a hand-written torch GPT-2 (tests/ref/explain_ref.py; issue 36 items 1,
# 2); logprobs: a byte-fallback candidate in the top logprob lists as its text or OpenAI's
# "bytes:\xNN", never its <0xNN> piece (issue 36 item 4); tgi: TGI's compat route POST /
# (issue 36 item 4).
set(KG_SERVER_E2E health tokenize next_token generate completions chat responses tgi_sagemaker
  score bad_input transport lifecycle auth_cors explain logprobs tgi)
if(TARGET kogpt2d AND PYTHON3)
  foreach(_family ${KG_SERVER_E2E})
    add_test(NAME test_server_${_family}
      COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_${_family}.py)
    set_tests_properties(test_server_${_family} PROPERTIES SKIP_RETURN_CODE 77
      LABELS "server;e2e" TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  endforeach()
  set_tests_properties(test_server_explain PROPERTIES LABELS "server;e2e;parity")
  # an operator's kogpt2d (issue 29): request ids, API keys, --version, KOGPT2_* variables,
  # --log-format json, kogpt2_build_info
  add_test(NAME test_server_ops COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_ops.py)
  set_tests_properties(test_server_ops PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  add_test(NAME test_server_abuse
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_abuse.py)
  set_tests_properties(test_server_abuse PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # no U+FFFD from any sampling endpoint on the default model with utf8_strict (issue 26)
  add_test(NAME test_server_utf8 COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_utf8.py)
  set_tests_properties(test_server_utf8 PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 600 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # several models in one daemon (issue 26 item 13): routing by "model", /v1/models, 404s,
  # streams on the second model, a single model's answers unchanged
  add_test(NAME test_server_models
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_models.py)
  set_tests_properties(test_server_models PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # the KV cache end to end (issue 34): its figures, its flags refused, shared prefixes,
  # preemption under a small cache, --kv-dtype bf16
  add_test(NAME test_server_kv COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_kv.py)
  set_tests_properties(test_server_kv PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # kogpt2d's flags and KOGPT2_* variables as an operator gets them wrong (issue 32 items 8-9,
  # issue 33 item 3), and a daemon serving two named models exiting 0 (clean under ASan's
  # LeakSanitizer), on the default model
  add_test(NAME test_server_flags COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_flags.py)
  set_tests_properties(test_server_flags PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # the README's curl examples, as printed, on the default model (issue 15)
  add_test(NAME test_readme_examples
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_readme_examples.py)
  set_tests_properties(test_readme_examples PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 300 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
  # kogpt2d against an attacker and a careless operator (issue 32), on models/default: NUL bytes
  # in the files it reads, a Responses stream cut short (second SIGTERM, a failure midway),
  # unknown request fields refused by name, the connection admission under slow and
  # sequential connections, RSS after large tokenize bodies
  add_test(NAME test_server_hardening
    COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_hardening.py)
  set_tests_properties(test_server_hardening PROPERTIES SKIP_RETURN_CODE 77 LABELS "server;e2e"
    TIMEOUT 600 ENVIRONMENT "KG_BUILD_DIR=${CMAKE_BINARY_DIR}")
endif()
