# Tokenizer tests (issue 3). Parity tests need ../shared, /usr/bin/python3 with
# python3-sentencepiece (v1) and node with tests/node_modules (v2: `npm ci --ignore-scripts`
# in tests/); without them they exit 77 (skipped).
kg_test(test_tok_unit SOURCES test_tok_unit.c LIBS kgtok PkgConfig::CJSON Threads::Threads
  LABELS tokenizer)
# the default model's tokenizer (in the repository, so this runs in a fresh clone too)
kg_test(test_tok_default SOURCES test_tok_default.c LIBS kgtok PkgConfig::CJSON Threads::Threads
  LABELS tokenizer)
kg_test(test_tok_parity SOURCES test_tok_parity.c LIBS kgtok PkgConfig::CJSON ARGS v2
  LABELS "tokenizer;parity")
# The same executable against SentencePiece: one more ctest entry, same environment.
add_test(NAME test_tok_parity_v1 COMMAND test_tok_parity v1)
get_test_property(test_tok_parity ENVIRONMENT _tok_env)
set_tests_properties(test_tok_parity_v1 PROPERTIES SKIP_RETURN_CODE 77
  LABELS "tokenizer;parity" ENVIRONMENT "${_tok_env}")
set_tests_properties(test_tok_parity PROPERTIES TIMEOUT 300)
set_tests_properties(test_tok_parity_v1 PROPERTIES TIMEOUT 300)

# The command line on KoGPT2 v2's own tokenizer (needs the kogpt2 target, i.e. the model core,
# to link): the ids Hugging Face's tokenizers give. Skipped when ../shared is missing; the same
# checks on the default model's tokenizer, against libsentencepiece, are test_cli_tokenize_default.
if(TARGET kogpt2)
  set(_tok_v2 "${KG_SHARED_DIR}/data/kogpt2/v2")
  add_test(NAME test_tok_cli_json COMMAND kogpt2 tokenize --tokenizer ${_tok_v2} --json
    "안녕하세요. 한국어 GPT-2 입니다.😤:)l^o")
  set_tests_properties(test_tok_cli_json PROPERTIES LABELS tokenizer
    SKIP_REGULAR_EXPRESSION "No such file or directory"
    PASS_REGULAR_EXPRESSION
    "{\"tokens\":\\[25906,8702,7801,25856,34407,10528,422,426,18258,9241,12521,254,110,162\\],\"pieces\":\\[\"▁안녕\",\"하\",")
  add_test(NAME test_tok_cli_jsonl COMMAND sh -c
    "printf '%s\\n' '\"안녕\"' '\"\"' '\"  두 칸\"' | '$<TARGET_FILE:kogpt2>' tokenize --tokenizer '${_tok_v2}' --jsonl")
  set_tests_properties(test_tok_cli_jsonl PROPERTIES LABELS tokenizer
    SKIP_REGULAR_EXPRESSION "No such file or directory"
    PASS_REGULAR_EXPRESSION
    "{\"tokens\":\\[25906\\],\"pieces\":\\[\"▁안녕\"\\]}\n{\"tokens\":\\[\\],\"pieces\":\\[\\]}\n{\"tokens\":\\[739,9174,12063\\],")
  add_test(NAME test_tok_cli_detokenize COMMAND kogpt2 detokenize --tokenizer ${_tok_v2} --json
    25906,8702,7801,25856,254,110)
  set_tests_properties(test_tok_cli_detokenize PROPERTIES LABELS tokenizer
    SKIP_REGULAR_EXPRESSION "No such file or directory"
    PASS_REGULAR_EXPRESSION "{\"text\":\"안녕하세요.😤:\\)\"}")
endif()
