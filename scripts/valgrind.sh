#!/usr/bin/env bash
# valgrind memcheck over the command-line paths: model loading and a forward pass, the
# tokenizers. Any error or leak fails. Needs a build dir with the test data already made
# by ctest (the gpt2_testdata fixture).   scripts/valgrind.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
vg="valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --suppressions=scripts/valgrind.supp"
passed=0 failed=0 skipped=0
run() { # name, command...
    local name=$1; shift
    if $vg "$@" >/dev/null 2>/tmp/kg-valgrind.log; then
        passed=$((passed + 1)); echo "valgrind ok: $name"
    else
        failed=$((failed + 1)); echo "valgrind FAILED: $name"; cat /tmp/kg-valgrind.log
    fi
}
model=$build/testdata/gpt2/tiny_tanh_f32
if [ -d "$model" ]; then
    run "kogpt2 next" "$build/kogpt2" next --model "$model" --tokens 1,2,3,4 --top-k 5 --json --threads 2
    run "kogpt2 next (bad tokens)" sh -c "! $build/kogpt2 next --model $model --tokens 1,999999"
else
    skipped=$((skipped + 2)); echo "valgrind skip: no test model in $model (run ctest first)"
fi
shared=${KG_SHARED_DIR:-../shared}
if [ -d "$shared/data/kogpt2" ]; then
    run "kogpt2 tokenize v2" "$build/kogpt2" tokenize --tokenizer "$shared/data/kogpt2/v2/tokenizer.json" --json "안녕하세요. 한국어 GPT-2 입니다.😤:)l^o"
    run "kogpt2 tokenize v1" "$build/kogpt2" tokenize --tokenizer "$shared/data/kogpt2/v1/kogpt2_news_wiki_ko_cased_818bfa919d.spiece" --json "지미 카터는 조지아주 섬터 카운티 플레인스 마을에서 태어났다."
else
    skipped=$((skipped + 2)); echo "valgrind skip: $shared/data/kogpt2 not found"
fi
echo "valgrind: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
