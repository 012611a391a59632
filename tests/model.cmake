# Model core tests (issue 2). Included by tests/CMakeLists.txt, which defines kg_test().
#
# Parity: the fixture test gpt2_testdata runs tests/ref/gpt2_ref.py once per ctest run. It
# writes random checkpoints (small shapes and the KoGPT2-base shape in f32/f16/bf16) and their
# PyTorch reference log-probs into ${CMAKE_BINARY_DIR}/testdata/gpt2, and returns at once when
# they are already there for this version of the script (testdata/gpt2/STAMP). Every parity
# test requires the fixture and skips (77) when torch is missing.
if(NOT TARGET kgmodel)
  return()
endif()

set(KG_GPT2_TESTDATA "${CMAKE_BINARY_DIR}/testdata/gpt2")
if(PYTHON3)
  kg_fixture(gpt2_testdata COMMAND ${PYTHON3} ${CMAKE_SOURCE_DIR}/tests/ref/gpt2_ref.py
    ${KG_GPT2_TESTDATA} LABELS "model;parity" TIMEOUT 600)
endif()

kg_test(test_model_config SOURCES test_model_config.c LIBS kgmodel LABELS model)
kg_test(test_model_safetensors SOURCES test_model_safetensors.c LIBS kgmodel LABELS model)
kg_test(test_kgmath SOURCES test_kgmath.c LIBS kgmodel LABELS model)
kg_test(test_cpu_matmul SOURCES test_cpu_matmul.c LIBS kgmodel LABELS model)
# the thread pool under 20 million short loops per pool size (every task exactly once, none
# after return); label pool: the ThreadSanitizer stage of scripts/test.sh runs it
kg_test(test_cpu_pool SOURCES test_cpu_pool.c LIBS kgmodel LABELS "model;pool")
set_tests_properties(test_cpu_pool PROPERTIES TIMEOUT 600)

# The small cases in one test; the KoGPT2 shape one test per dtype so that ctest -j spreads them.
kg_test(test_gpt2_parity SOURCES test_gpt2_parity.c LIBS kgmodel LABELS "model;parity"
  ARGS tiny_tanh_f32 tiny_erf_f32 tiny_relu_f32 small_tanh_f16 small_erf_f16 small_tanh_bf16
       small_erf_bf16 odd_untied_f32 noprefix_f32)
get_test_property(test_gpt2_parity ENVIRONMENT KG_PARITY_ENV)
set(KG_PARITY_TESTS test_gpt2_parity)
foreach(dtype f32 f16 bf16)
  add_test(NAME test_gpt2_parity_kogpt2_${dtype} COMMAND test_gpt2_parity kogpt2_${dtype})
  set_tests_properties(test_gpt2_parity_kogpt2_${dtype} PROPERTIES SKIP_RETURN_CODE 77
    LABELS "model;parity" ENVIRONMENT "${KG_PARITY_ENV}")
  list(APPEND KG_PARITY_TESTS test_gpt2_parity_kogpt2_${dtype})
endforeach()
set_tests_properties(${KG_PARITY_TESTS} PROPERTIES FIXTURES_REQUIRED gpt2_testdata TIMEOUT 600)

# the KV cache's block pool: allocation, sharing, copy-on-write, eviction (model/kv.h)
kg_test(test_model_kv SOURCES test_model_kv.c LIBS kgmodel LABELS model)
# each KV cache dtype (--kv-dtype f32/f16/bf16/q8_0) against PyTorch with the keys and values
# held in it (tests/ref/kv_dtype_ref.py), prefill and decode, on every ISA
set(KG_KV_TESTDATA "${CMAKE_BINARY_DIR}/testdata/kv")
kg_test(test_gpt2_kv_dtype SOURCES test_gpt2_kv_dtype.c LIBS kgmodel LABELS "model;parity"
  ARGS ${KG_KV_TESTDATA})
if(PYTHON3)
  kg_fixture(kv_dtype_testdata COMMAND ${PYTHON3} ${CMAKE_SOURCE_DIR}/tests/ref/kv_dtype_ref.py
    ${KG_KV_TESTDATA} LABELS "model;parity" TIMEOUT 300)
  set_tests_properties(test_gpt2_kv_dtype PROPERTIES FIXTURES_REQUIRED kv_dtype_testdata)
endif()
kg_test(test_model_sampler SOURCES test_model_sampler.c LIBS kgmodel LABELS model)
# logits.c alone: log-sum-exp, entropy, top k and ranks against hand-checked rows and a long
# double / full-sort reference on V = 51,200 (issue 33 item 6)
kg_test(test_model_logits SOURCES test_model_logits.c LIBS kgmodel LABELS model)
kg_test(test_model_sampler_utf8 SOURCES test_model_sampler_utf8.c LIBS kgmodel LABELS model)

# The checkpoints users have (issue 14): torch writes pytorch_model.bin files (f32/f16/bf16,
# tied, views, ZIP64), shards, a Hugging Face cache and the malicious files a loader must
# refuse, from the gpt2_testdata models (so that logits can be compared bit for bit).
set(KG_TORCH_TESTDATA "${CMAKE_BINARY_DIR}/testdata/torch")
if(PYTHON3)
  kg_fixture(torch_testdata COMMAND ${PYTHON3} ${CMAKE_SOURCE_DIR}/tests/ref/torch_ckpt_ref.py
    ${KG_TORCH_TESTDATA} ${KG_GPT2_TESTDATA} LABELS "model;parity" TIMEOUT 300)
  set_tests_properties(torch_testdata PROPERTIES FIXTURES_REQUIRED gpt2_testdata)
endif()
kg_test(test_model_torch SOURCES test_model_torch.c LIBS kgmodel LABELS "model;parity")
set_tests_properties(test_model_torch PROPERTIES FIXTURES_REQUIRED "gpt2_testdata;torch_testdata"
  TIMEOUT 300)

# Quantized weights (issue 16): q8_0/q4_0 blocks against a NumPy reference of ggml's formulas,
# and the quantized matmul on every ISA against a double reference on the dequantized weights.
set(KG_QUANT_REF "${CMAKE_BINARY_DIR}/testdata/quant_ref.bin")
kg_test(test_cpu_matmul_q SOURCES test_cpu_matmul_q.c LIBS kgmodel LABELS model
  ARGS ${KG_QUANT_REF})
if(PYTHON3)
  kg_fixture(quant_testdata COMMAND ${PYTHON3} ${CMAKE_SOURCE_DIR}/tests/ref/quant_ref.py
    ${KG_QUANT_REF} LABELS model TIMEOUT 120)
  set_tests_properties(test_cpu_matmul_q PROPERTIES FIXTURES_REQUIRED quant_testdata)
endif()
# whole models at q8_0 / q4_0 against f32 (top-1 agreement, KL), on the parity fixture's models;
# the KoGPT2-base shape a test of its own, as the parity cases are (the sanitizer stage leaves
# it to the release run: the small shapes take the same code paths)
kg_test(test_gpt2_quant SOURCES test_gpt2_quant.c LIBS kgmodel LABELS "model;parity"
  ARGS ${KG_GPT2_TESTDATA} tiny_tanh_f32 small_erf_f16 noprefix_f32)
add_test(NAME test_gpt2_quant_kogpt2_f32 COMMAND test_gpt2_quant ${KG_GPT2_TESTDATA} kogpt2_f32)
get_test_property(test_gpt2_quant ENVIRONMENT _quant_model_env)
set_tests_properties(test_gpt2_quant test_gpt2_quant_kogpt2_f32 PROPERTIES
  FIXTURES_REQUIRED gpt2_testdata TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "model;parity"
  ENVIRONMENT "${_quant_model_env}")
# quantized model directories (kogpt2 convert --dtype q8_0|q4_0) against quantizing at load,
# bit for bit, and the broken quantized files the loader must refuse
kg_test(test_gpt2_convert SOURCES test_gpt2_convert.c LIBS kgmodel LABELS model)
set_tests_properties(test_gpt2_convert PROPERTIES TIMEOUT 300)

# The logit lens and the attention view (issue 36): the captures of the forward against a
# hand-written float64 PyTorch GPT-2 returning hidden states and attention probabilities, on the
# default model (its own tokenizer encodes the prompt) and the KoGPT2-base shape (random f32).
set(KG_EXPLAIN_TESTDATA "${CMAKE_BINARY_DIR}/testdata/explain")
set(_explain_models default=${CMAKE_SOURCE_DIR}/models/default kogpt2=${KG_GPT2_TESTDATA}/kogpt2_f32)
if(PYTHON3)
  kg_fixture(explain_testdata COMMAND ${PYTHON3} ${CMAKE_SOURCE_DIR}/tests/ref/explain_ref.py
    ${KG_EXPLAIN_TESTDATA} ${_explain_models} LABELS "model;parity" TIMEOUT 600)
  set_tests_properties(explain_testdata PROPERTIES FIXTURES_REQUIRED gpt2_testdata)
endif()
kg_test(test_gpt2_explain SOURCES test_gpt2_explain.c LIBS kgmodel LABELS "model;parity"
  ARGS ${KG_EXPLAIN_TESTDATA} ${_explain_models})
set_tests_properties(test_gpt2_explain PROPERTIES FIXTURES_REQUIRED explain_testdata TIMEOUT 300)
