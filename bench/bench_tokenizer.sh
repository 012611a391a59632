#!/bin/sh
# bench_tokenizer.sh — encode MB/s of our two tokenizers and of the reference implementations,
# on the same Korean text in the same run (figures only, never pass/fail).
#
#   bench/bench_tokenizer.sh [BUILD_DIR]        from the repository root; BUILD_DIR: build
#
# Needs the build's bench_tokenizer, ../shared (or KG_SHARED_DIR), /usr/bin/python3 with
# python3-sentencepiece, and node with tests/node_modules (npm ci --ignore-scripts in tests/).
set -eu
build=${1:-build}
shared=${KG_SHARED_DIR:-../shared}
py=${KG_PYTHON:-/usr/bin/python3}
v1="$shared/data/kogpt2/v1/kogpt2_news_wiki_ko_cased_818bfa919d.spiece"
v2="$shared/data/kogpt2/v2/tokenizer.json"
v2ref="$shared/data/kogpt2/v2/tokenizer.no_endoftext.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" tests/ref/tok_corpus.py "$shared" 2000 corpus-only > "$tmp/in.jsonl"
{
    "$build/bench_tokenizer" "$v1" "$tmp/in.jsonl" 2>/dev/null | sed 's/^/v1\t/'
    "$py" tests/ref/tok_bench_ref.py "$v1" "$tmp/in.jsonl" | sed 's/^/v1\t/'
    "$build/bench_tokenizer" "$v2" "$tmp/in.jsonl" 2>/dev/null | sed 's/^/v2\t/'
    (cd tests && node ref/tok_bench_ref.mjs "$v2ref" "$tmp/in.jsonl") | sed 's/^/v2\t/'
} | awk -F'\t' 'BEGIN { printf "%-4s %-48s %8s %9s %9s\n", "tok", "implementation", "MB", "seconds", "MB/s" }
                { printf "%-4s %-48s %8s %9s %9s\n", $1, $2, $3, $4, $5 }'
echo "(encode, one thread, best of 3 passes, line by line unless noted; $(nproc) cores)"
