#!/bin/sh
# test_train_fixture.sh OUT_DIR — the train tests' inputs, made once per build tree:
#   OUT_DIR/corpus.txt   ~4000 lines of generated Korean sentences (a small grammar, fixed seed)
#   OUT_DIR/tok.model    a 400-piece SentencePiece BPE model trained on it (byte fallback)
#   OUT_DIR/data/        `kogpt2-train prepare` shards of the corpus (every 10th line held out)
# Skips (77) when Debian's spm_train (package sentencepiece) is missing.
set -eu
out=$1
build=${KG_BUILD_DIR:?}
[ -f "$out/STAMP" ] && [ "$(cat "$out/STAMP")" = 2 ] && exit 0
command -v spm_train >/dev/null 2>&1 || { echo "SKIP: spm_train not installed"; exit 77; }
rm -rf "$out"
mkdir -p "$out"
awk 'BEGIN {
  srand(7);
  split("나는 우리는 친구가 선생님이 아이들이 할머니가 고양이가 학생들이", s, " ");
  split("아침에 오늘 어제 주말에 저녁에 가끔 매일 천천히", t, " ");
  split("학교에 공원에 시장에 도서관에 바다에 산에 집에 회사에", p, " ");
  split("갔다. 간다. 가고 싶다. 갔습니다. 가요. 걸어갔다. 달려갔다. 놀러 갔다.", v, " ");
  split("책을 사과를 음악을 영화를 편지를 밥을 그림을 노래를", o, " ");
  split("읽었다. 먹었다. 들었다. 보았다. 썼다. 만들었다. 그렸다. 불렀다.", w, " ");
  for (i = 0; i < 4000; i++) {
    a = int(rand() * 8) + 1; b = int(rand() * 8) + 1; c = int(rand() * 8) + 1;
    if (rand() < 0.5) print s[a] " " t[b] " " p[c] " " v[c];
    else print s[a] " " t[b] " " o[c] " " w[c];
  }
}' > "$out/corpus.txt"
spm_train --input="$out/corpus.txt" --model_prefix="$out/tok" --vocab_size=400 \
  --model_type=bpe --byte_fallback=true --character_coverage=1.0 --num_threads=2 \
  --minloglevel=2 >"$out/spm_train.log" 2>&1
"$build/kogpt2-train" prepare --tokenizer "$out/tok.model" --input "$out/corpus.txt" \
  --out "$out/data" --val-every-doc 10
echo 2 > "$out/STAMP"
