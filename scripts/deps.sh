#!/usr/bin/env bash
# Installs what kogpt2 needs to build and to run its tests on Debian 12 (run as root).
# Build: compiler, CMake, cJSON, SentencePiece, utf8proc, OpenBLAS; libmicrohttpd 1.0 built
# from Debian 13's source by scripts/build_mhd.sh (Debian 12's 0.9.75 frames HTTP unsafely).
# Training: zlib (gzip corpora), OpenMPI (data parallelism).
# Tests: PyTorch and NumPy (reference forward/backward passes), python3-sentencepiece and the
# npm package @huggingface/tokenizers (reference tokenizers), Chromium + playwright-core (the
# Explorer in a browser; Debian's Chromium, never a downloaded one), a Korean font for its
# screenshots, nginx (the fleet test of docker/nginx.conf), prometheus (for promtool, which
# lints a live /metrics in tests/clients; Debian has no promtool alone), clang-format,
# valgrind, clang with its libFuzzer runtime (scripts/fuzz.sh), podman and what it needs to
# build and test the image (docker/podman_setup.sh, docker/test_images.sh). CUDA (nvcc, cuBLAS, NCCL) is
# not from Debian: the CUDA backend is built when a toolkit is in /usr/local/cuda or on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    build-essential cmake ninja-build pkg-config git ca-certificates curl \
    libcjson-dev libsentencepiece-dev sentencepiece libutf8proc-dev \
    libopenblas-dev zlib1g-dev libopenmpi-dev openmpi-bin \
    python3 python3-torch python3-numpy python3-sentencepiece \
    chromium fonts-nanum nginx python3-yaml clang-format valgrind \
    clang libclang-rt-14-dev prometheus \
    podman buildah runc debootstrap uidmap slirp4netns fuse-overlayfs >/dev/null
scripts/build_mhd.sh /usr/local
# Node.js for the reference tokenizer and the browser test: Debian's, unless a Node.js with
# npm is already installed (a distribution of Node.js that bundles npm conflicts with Debian's)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# npm packages for the tests, with no install scripts (nothing downloads a browser):
# the reference tokenizer.json implementation, playwright-core to drive Chromium, and the
# client libraries of the client suite (tests/clients: openai, @langchain/openai)
(cd tests && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
(cd tests/browser && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
(cd tests/clients && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "deps: ok"
