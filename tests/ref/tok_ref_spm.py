#!/usr/bin/python3
"""Reference for SentencePiece models: Debian's python3-sentencepiece (libsentencepiece).

Usage: tok_ref_spm.py MODEL < strings.jsonl > out.jsonl
Each input line is a JSON string; each output line is {"ids": [...], "text": decode(ids)}.
Run it with /usr/bin/python3 (a pyenv python may lack the Debian module).
"""
import json
import sys

import sentencepiece


def main():
    sp = sentencepiece.SentencePieceProcessor(model_file=sys.argv[1])
    for line in sys.stdin:
        ids = sp.encode(json.loads(line))
        out = {"ids": ids, "text": sp.decode(ids)}
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
