#!/usr/bin/env bash
# Installs what kogpt2 needs to build and to run its tests on Debian 12 (run as root).
# Build: compiler, CMake, libmicrohttpd, cJSON, SentencePiece, utf8proc, OpenBLAS.
# Tests: PyTorch and NumPy (reference forward passes), python3-sentencepiece and the npm
# package @huggingface/tokenizers (reference tokenizers), clang-format, valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    build-essential cmake ninja-build pkg-config git ca-certificates \
    libcjson-dev libmicrohttpd-dev libsentencepiece-dev sentencepiece libutf8proc-dev \
    libopenblas-dev \
    python3 python3-torch python3-numpy python3-sentencepiece \
    nodejs npm clang-format valgrind >/dev/null
# reference tokenizer for the tokenizer.json parity tests (no install scripts: nothing downloads)
(cd tests && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "deps: ok"
