#!/bin/sh
# How unseen.txt was made: KLUE dev sentences (CC BY-SA 4.0; DP and NER sentences with the
# entity marks removed, STS sentence pairs, NLI premises and hypotheses except the nsmc and
# wikinews sources), whitespace collapsed, >= 10 characters, deduplicated, in file order; then
# every sentence whose middle 24 characters, or the 20 characters from a quarter in, occur
# anywhere in the training corpora (nsmc, boddari, debian_ko, chatbot_data) is dropped
# (2,443 of 11,421). Result: 8,978 lines, 1,006,578 bytes.
#   models/make_unseen.sh [CORPORA] > unseen.txt      (then: models/eval_bpb.sh MODEL unseen.txt)
set -eu
C=${1:-$(cd "$(dirname "$0")/.." && pwd)/../shared/data/corpora}
here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
python3 "$here/make_unseen.py" "$C" > "$t/cand.txt" 2> /dev/null
{ zcat "$C/nsmc/nsmc_raw_reviews.tsv.gz"
  cat "$C"/boddari/*.txt "$C"/boddari/*.csv "$C"/debian_ko/*.txt "$C/chatbot_data/ChatbotData.csv"; } > "$t/train.txt"
filter() { # python expression for the probe of line s
  python3 -c "import sys
for s in open(sys.argv[1], encoding='utf-8').read().split('\n')[:-1]: print($1)" "$2" > "$t/pats.txt"
  LC_ALL=C grep -a -F -o -f "$t/pats.txt" "$t/train.txt" | sort -u > "$t/hits.txt" || true
  python3 -c "import sys
hits = set(open(sys.argv[2], encoding='utf-8', errors='replace').read().split('\n'))
for s in open(sys.argv[1], encoding='utf-8').read().split('\n')[:-1]:
    if ($1) not in hits: print(s)" "$2" "$t/hits.txt" > "$t/next.txt"
  mv "$t/next.txt" "$2"
}
filter 's[max(0, len(s) // 2 - 12):len(s) // 2 + 12]' "$t/cand.txt"
filter 's[len(s) // 4:len(s) // 4 + 20]' "$t/cand.txt"
cat "$t/cand.txt"
