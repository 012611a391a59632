#!/usr/bin/python3
"""Writes the tokenizer parity inputs as JSON lines (one JSON string per line) to stdout.

Usage: tok_corpus.py SHARED_DIR [LINES_PER_SOURCE [corpus-only]]

Real Korean lines sampled evenly from several corpora in SHARED_DIR/data/corpora, then
hand-made edge cases, then one ~1 MB text made of corpus lines joined by newlines. The
output is deterministic, so both the reference tokenizer and ours see exactly the same
inputs. Lines never contain U+0000 (our test's JSON reader keeps C strings). With
"corpus-only" (the benchmark's input) it writes the corpus lines alone.
"""
import gzip
import json
import os
import sys
import unicodedata

SOURCES = [  # (path under data/corpora, column of a tab-separated file or None)
    ("boddari/book_review01.txt", None),
    ("boddari/wikinews.txt", None),
    ("boddari/unesco_report.txt", None),
    ("boddari/fairytale01.txt", None),
    ("debian_ko/gimp-help-ko.txt", None),
    ("debian_ko/texlive-lang-korean-docs.txt", None),
    ("debian_ko/usr-share-locale-ko-mo.ui.txt", None),
    ("debian_ko/debian-faq-ko.txt", None),
    ("nsmc/nsmc_raw_reviews.tsv.gz", 4),
    ("chatbot_data/ChatbotData.csv", None),
    ("question_pair/train.txt", None),
    ("kor_nlu/KorSTS/sts-train.tsv", 5),
    ("kor_nlu/KorNLI/xnli.dev.ko.tsv", None),
]

EDGE_CASES = [
    "", " ", "   ", "\n", "\n\n\n", "  \n  \n", " \n", "\n ", "a  b   c    d", "끝 공백  ",
    "\t", "\t탭\t문자\t", "\r\n윈도우 줄바꿈\r\n", "줄\n바꿈\n\n두 번", "  두 칸  공백",
    "좋아요😤:)ㅋㅋㅋ", "ㅎㅎ^^;", "<usr>안녕<sys>네<unk>?<unused99>끝", "<s></s><pad>", "<s> 안녕",
    "안녕 </s>", "😀😃😄 웃음", "👨‍👩‍👧‍👦가족", "❤️사랑해", ":-):):-( 표정", "l^o하하", "x:)y:(z",
    "大韓民國 憲法 第一條", "漢字語와 한글을 섞은 文章입니다.",
    "GPT-2는 2019년에 OpenAI가 발표했다. v1.2.3 abc123XYZ", "https://example.com/path?q=1&r=2",
    "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ１２３！？", "（괄호）［대괄호］", "①②③ ㈜ ㎞ ㎏ ™ ½",
    unicodedata.normalize("NFD", "한국어 자모 분해 테스트입니다."),
    "ㅋㅋㅋ ㅎㅎ ㅠㅠ ㄱㄴㄷ ㅏㅑㅓ", "\u1100\u1101\u1102 \u1161\u1162 \u11a8\u11a9", "ㅋㅏ ㄱㅏㄴ",
    "\u1112\u1161\u11ab\u1100\u1173\u11af", "제\u200b로\u200c폭\u200d문자", "\ufeffBOM으로 시작",
    "\u2060단어\u2060결합", "줄\u00a0바꿈\u00a0없는 공백", "전각\u3000공백", "말줄임…", "“인용”과 ‘작은’",
    "e\u0301 café", "日本語 にほんご Русский عربى ελληνικά", "∑∫√∞ ≠ ≤", "▁이미▁있는 ▁기호",
    "<|endoftext|>", "가" * 3000, "ㅋ" * 2000, "a" * 1000, "😂" * 300, "숫자1234567890" * 50,
    "\U0001F9D1\u200D\U0001F4BB 코딩", "\u00ad소프트\u00ad하이픈", "\x01\x02제어\x7f문자",
]


def read_lines(path, column):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    if column is not None:
        lines = [l.split("\t")[column] for l in lines[1:] if len(l.split("\t")) > column]
    return [l.replace("\x00", "") for l in lines if l.strip()]


def main():
    shared = sys.argv[1]
    per_source = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    corpus_only = len(sys.argv) > 3 and sys.argv[3] == "corpus-only"
    out = sys.stdout
    corpus = []
    for rel, column in SOURCES:
        lines = read_lines(os.path.join(shared, "data", "corpora", rel), column)
        step = max(1, len(lines) // per_source)
        corpus.extend(lines[::step][:per_source])
    for text in corpus if corpus_only else corpus + EDGE_CASES:
        out.write(json.dumps(text, ensure_ascii=False) + "\n")
    if corpus_only:
        return
    big, size = [], 0
    for line in corpus:
        if size >= 1 << 20:
            break
        big.append(line)
        size += len(line.encode("utf-8")) + 1
    out.write(json.dumps("\n".join(big), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
