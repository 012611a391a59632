#!/usr/bin/env bash
# Installs what kogpt2 needs on Debian 12. Needs root: as a normal user it runs itself again
# through sudo (and says so); as root (a fresh Debian, a container: no sudo) it just runs.
#   scripts/deps.sh build   what building and serving need (the README's first command)
#   scripts/deps.sh         everything: the build set, training's MPI and what the tests need
# Build: compiler, CMake, Ninja, pkg-config, curl, cJSON, SentencePiece, utf8proc, OpenBLAS,
# zlib (kogpt2-train prepare reads .gz corpora); libmicrohttpd 1.0 built from Debian 13's
# source by scripts/build_mhd.sh (Debian 12's 0.9.75 frames HTTP unsafely). The same list as
# docker/Dockerfile's build stage.
# Everything adds: OpenMPI (data-parallel training; kogpt2-train builds without it), git;
# for the tests: PyTorch and NumPy (reference forward/backward passes), python3-sentencepiece
# and the npm package @huggingface/tokenizers (reference tokenizers), Chromium +
# playwright-core (the Explorer in a browser; Debian's Chromium, never a downloaded one), a
# Korean font for its screenshots, nginx (the fleet test of docker/nginx.conf), prometheus
# (for promtool, which lints a live /metrics in tests/clients and checks and unit-tests the
# alerting rules of docker/k8s/monitoring; Debian has no promtool alone), python3-yaml (the
# k8s manifests' checks),
# clang-format, valgrind, clang with its libFuzzer runtime (scripts/fuzz.sh), podman and what
# it needs to build and test the image (docker/podman_setup.sh, docker/test_images.sh).
# CUDA (nvcc, cuBLAS, NCCL) is not from Debian: the CUDA backend is built when a toolkit is in
# /usr/local/cuda or on PATH.
set -euo pipefail
what=${1:-all}
case $what in
  build | all) ;;
  *) echo "usage: scripts/deps.sh [build]   (build: only what building and serving need)" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then
    echo "deps: apt-get needs root: running again as root with sudo"
    exec sudo -- "$(readlink -f "$0")" "$@"
  fi
  echo "deps: apt-get needs root, and there is no sudo here: run it as root, e.g. su -c '$0 $*'" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
build_pkgs=(build-essential cmake ninja-build pkg-config ca-certificates curl
  libcjson-dev libsentencepiece-dev libutf8proc-dev libopenblas-dev zlib1g-dev)
test_pkgs=(git libopenmpi-dev openmpi-bin sentencepiece
  python3 python3-torch python3-numpy python3-sentencepiece
  chromium fonts-nanum nginx python3-yaml clang-format valgrind
  clang libclang-rt-14-dev prometheus
  podman buildah runc debootstrap uidmap slirp4netns fuse-overlayfs)
pkgs=("${build_pkgs[@]}")
[ "$what" = build ] || pkgs+=("${test_pkgs[@]}")
echo "deps: apt-get install ${#pkgs[@]} packages ($what)"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
scripts/build_mhd.sh /usr/local
if [ "$what" = build ]; then
  echo "deps: ok (build and serve; scripts/deps.sh with no argument adds what the tests need)"
  exit 0
fi
# Node.js for the reference tokenizer and the browser test: Debian's, unless a Node.js with
# npm is already installed (a distribution of Node.js that bundles npm conflicts with Debian's)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# npm packages for the tests, with no install scripts (nothing downloads a browser): the
# reference tokenizer.json implementation, playwright-core to drive Chromium, the client
# libraries of the client suite (tests/clients: openai, @langchain/openai), and the schemas the
# deployment manifests are validated against offline (tests/deploy: kubernetes-models, the
# Prometheus Operator's models, @grafana/schema, typescript). Under sudo the node_modules
# folders are then given to the user who asked, as their checkout is theirs.
for d in tests tests/browser tests/clients tests/deploy; do
  (cd "$d" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  if [ -n "${SUDO_UID:-}" ] && [ "$SUDO_UID" != 0 ]; then
    chown -R "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "$d/node_modules"
  fi
done
echo "deps: ok"
