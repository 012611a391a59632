#!/usr/bin/env bash
# The images' build steps (docker/Dockerfile runs this, docker/stage_cuda.sh runs it with
# KG_CUDA=ON for docker/Dockerfile.cuda; it also runs without Docker):
#   docker/build.sh PREFIX [extra CMake arguments]
#   KG_CUDA=ON docker/build.sh PREFIX            the CUDA build (docker/stage_cuda.sh)
# Configures and builds kogpt2 (Release) in $KG_DOCKER_BUILD_DIR (default build-docker/, or
# build-docker-cuda/ with KG_CUDA=ON), then installs into PREFIX:
#   PREFIX/bin/kogpt2d, PREFIX/bin/kogpt2       the daemon and the CLI (and kogpt2-train, KG_TRAIN=ON)
#   PREFIX/bin/libkgcuda.so                     KG_CUDA=ON: the CUDA backend, which the programs
#                                               open from beside themselves when a GPU is asked
#                                               for (and libkgnccl.so, a build with MPI and NCCL)
#   PREFIX/share/kogpt2/web/                    the Explorer (kogpt2d finds it from bin/)
#   PREFIX/share/kogpt2/models/default/         the default model
# and checks that the installed daemon starts on the installed model and answers /readyz.
# Env:
#   KG_CUDA=OFF|ON   OFF (default): -DKG_CUDA=OFF, a CPU build even where nvcc is installed.
#                    ON: -DKG_CUDA=ON with the toolkit in $CUDA_HOME (default /usr/local/cuda):
#                    its nvcc and CUDAToolkit_ROOT; the installed libkgcuda.so must link
#                    cuBLAS, and no program may (they open the library only for a GPU).
#   KG_TRAIN=ON      also build and install PREFIX/bin/kogpt2-train (default OFF; the CUDA image
#                    sets it: training on the GPU uses cuBLAS and NCCL)
#   KG_DOCKER_BUILD_DIR, KG_JOBS (default: nproc)
# Extra CMake arguments come last, so they override these.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: [KG_CUDA=ON] docker/build.sh PREFIX [cmake args...]" >&2; exit 2; }
PREFIX=$1; shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
CUDA=${KG_CUDA:-OFF}
case $CUDA in
  ON|on|1|yes) CUDA=ON ;;
  OFF|off|0|no|"") CUDA=OFF ;;
  *) echo "docker/build.sh: KG_CUDA must be ON or OFF, not '$CUDA'" >&2; exit 2 ;;
esac
ARGS=(-DCMAKE_BUILD_TYPE=Release -DKG_MPI=OFF)
if [ "$CUDA" = ON ]; then
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  [ -x "$CUDA_HOME/bin/nvcc" ] ||
    { echo "docker/build.sh: KG_CUDA=ON but no $CUDA_HOME/bin/nvcc (set CUDA_HOME)" >&2; exit 1; }
  export PATH="$CUDA_HOME/bin:$PATH"
  ARGS+=(-DKG_CUDA=ON "-DCUDAToolkit_ROOT=$CUDA_HOME" "-DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc")
  B=${KG_DOCKER_BUILD_DIR:-$SRC/build-docker-cuda}
else
  ARGS+=(-DKG_CUDA=OFF)
  B=${KG_DOCKER_BUILD_DIR:-$SRC/build-docker}
fi
BINS=(kogpt2d kogpt2)
case ${KG_TRAIN:-OFF} in ON|on|1|yes) BINS+=(kogpt2-train) ;; esac
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$SRC" -B "$B" "${GEN[@]}" "${ARGS[@]}" "$@"
cmake --build "$B" --target "${BINS[@]}" --parallel "${KG_JOBS:-$(nproc)}"
mkdir -p "$PREFIX/bin" "$PREFIX/share/kogpt2/models"
for bin in "${BINS[@]}"; do install -m 0755 "$B/$bin" "$PREFIX/bin/"; done
if [ "$CUDA" = ON ]; then  # built with the programs (model/CMakeLists.txt: kgmodel needs it)
  for lib in libkgcuda.so libkgnccl.so; do
    if [ -e "$B/$lib" ]; then install -m 0755 "$B/$lib" "$PREFIX/bin/"; fi
  done
fi
rm -rf "$PREFIX/share/kogpt2/web" "$PREFIX/share/kogpt2/models/default"
cp -R "$SRC/web" "$PREFIX/share/kogpt2/web"
cp -RL "$SRC/models/default" "$PREFIX/share/kogpt2/models/default"
if [ "$CUDA" = ON ]; then
  # A CUDA build that silently came out CPU-only would pass the smoke test below, and one whose
  # programs link cuBLAS would map it on every CPU start.
  # (ldd's output captured first: with pipefail, grep -q closing the pipe early fails it)
  libs=$(ldd "$PREFIX/bin/libkgcuda.so" 2>&1 || true)
  if [[ $libs != *libcublas* ]]; then
    echo "docker/build.sh: KG_CUDA=ON, but there is no $PREFIX/bin/libkgcuda.so linking cuBLAS (is the CUDA backend built?)" >&2
    exit 1
  fi
  for bin in "${BINS[@]}"; do
    libs=$(ldd "$PREFIX/bin/$bin")
    if [[ $libs == *libcudart* || $libs == *libcublas* ]]; then
      echo "docker/build.sh: $bin links the CUDA runtime or cuBLAS; only libkgcuda.so may" >&2
      exit 1
    fi
  done
fi
# Smoke test of what was installed: explicit paths, so a fallback to the source tree
# cannot hide a missing file. On a machine without a GPU (a docker build) the CUDA build
# must still start: --device auto falls back to the CPU.
help=$("$PREFIX/bin/kogpt2d" --help 2>&1)
DEV=(); case $help in *--device*) DEV=(--device auto) ;; esac
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18399)
"$PREFIX/bin/kogpt2d" --model "$PREFIX/share/kogpt2/models/default" \
  --web-dir "$PREFIX/share/kogpt2/web" --port "$port" --quiet "${DEV[@]}" &
pid=$!
ok=1
for _ in $(seq 300); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /readyz HTTP/1.0\r\n\r\n' >&3 &&
      grep -q ' 200 ' <&3) 2>/dev/null; then
    ok=0; break
  fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -TERM $pid 2>/dev/null; wait $pid || true
[ $ok -eq 0 ] || { echo "docker/build.sh: the installed kogpt2d did not become ready" >&2; exit 1; }
echo "docker/build.sh: installed into $PREFIX (KG_CUDA=$CUDA; kogpt2d ready on the installed model)"
