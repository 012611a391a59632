#!/usr/bin/env bash
# Configures and builds kogpt2 into build/ (Release). Extra arguments go to CMake,
# e.g. scripts/build.sh -DKG_OPENBLAS=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build
