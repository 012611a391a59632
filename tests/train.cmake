# kogpt2-train tests (issue 5). Included by tests/CMakeLists.txt, which defines kg_test().
#
# The fixture train_testdata (test_train_fixture.sh) generates a small Korean corpus, a
# 400-piece SentencePiece model (Debian's spm_train) and its shards into
# ${CMAKE_BINARY_DIR}/testdata/train once; tests that need them skip (77) without it.
if(NOT TARGET kgtrain)
  return()
endif()
set(KG_TRAIN_TESTDATA "${CMAKE_BINARY_DIR}/testdata/train")
set(KG_TRAIN_ENV "KG_SHARED_DIR=${KG_SHARED_DIR};KG_SOURCE_DIR=${CMAKE_SOURCE_DIR};KG_BUILD_DIR=${CMAKE_BINARY_DIR};KG_TRAIN_TESTDATA=${KG_TRAIN_TESTDATA}")

kg_test(test_train_adamw SOURCES test_train_adamw.c LIBS kgtrain LABELS train)

kg_fixture(train_testdata COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_train_fixture.sh
  ${KG_TRAIN_TESTDATA} LABELS train TIMEOUT 300 ENV "${KG_TRAIN_ENV}")

kg_test(test_train_ckpt SOURCES test_train_ckpt.c LIBS kgtrain LABELS train)
kg_test(test_train_shard SOURCES test_train_shard.c LIBS kgtrain LABELS train
  ARGS ${KG_TRAIN_TESTDATA}/tok.model)
kg_test(test_train_accum SOURCES test_train_accum.c LIBS kgtrain LABELS train)
# a tool for the scripts, not a test: max |a - b| over two checkpoints' tensors
add_executable(weights_cmp tools/weights_cmp.c)
target_link_libraries(weights_cmp PRIVATE kgmodel)

# kogpt2-train against careless input (issue 32): plot's ticks and long lines, export --force,
# empty directories (UBSan), grad_accum's bound on --resume; on models/default, no fixture
if(PYTHON3)
  add_test(NAME test_train_hardening COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/test_train_hardening.py)
  set_tests_properties(test_train_hardening PROPERTIES SKIP_RETURN_CODE 77 LABELS train TIMEOUT 300
    ENVIRONMENT "${KG_TRAIN_ENV}")
endif()

set(KG_TRAIN_TESTS test_train_shard)
foreach(t resume kill signal prepare mpi rankdeath e2e lock log bpb multihost cutlink zero)
  add_test(NAME test_train_${t} COMMAND sh ${CMAKE_SOURCE_DIR}/tests/test_train_${t}.sh)
  list(APPEND KG_TRAIN_TESTS test_train_${t})
endforeach()
set_tests_properties(test_train_resume test_train_kill test_train_signal test_train_prepare
  test_train_mpi test_train_rankdeath test_train_e2e test_train_lock test_train_log test_train_bpb
  test_train_multihost test_train_cutlink test_train_zero PROPERTIES SKIP_RETURN_CODE 77 LABELS train
  ENVIRONMENT "${KG_TRAIN_ENV};KG_MPI=${KG_TRAIN_MPI};KG_PYTHON=${PYTHON3}" TIMEOUT 120)
# the link-cut test waits out --dist-timeout and the hosts' TCP giving up, twice
set_tests_properties(test_train_cutlink PROPERTIES TIMEOUT 240)
# four evaluations of the default model on the held-out text (~60 s on an idle 2-core machine)
set_tests_properties(test_train_bpb PROPERTIES TIMEOUT 300)
set_tests_properties(${KG_TRAIN_TESTS} PROPERTIES FIXTURES_REQUIRED train_testdata)
