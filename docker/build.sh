#!/usr/bin/env bash
# The image's build steps (docker/Dockerfile runs this; it also runs without Docker):
#   docker/build.sh PREFIX [extra CMake arguments, e.g. -DKG_CUDA=ON]
# Configures and builds kogpt2 (Release) in $KG_DOCKER_BUILD_DIR (default build-docker/),
# then installs into PREFIX:
#   PREFIX/bin/kogpt2d, PREFIX/bin/kogpt2       the daemon and the CLI
#   PREFIX/share/kogpt2/web/                    the Explorer (kogpt2d finds it from bin/)
#   PREFIX/share/kogpt2/models/default/         the default model
# and checks that the installed daemon starts on the installed model and answers /readyz.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: docker/build.sh PREFIX [cmake args...]" >&2; exit 2; }
PREFIX=$1; shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=${KG_DOCKER_BUILD_DIR:-$SRC/build-docker}
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$SRC" -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DKG_MPI=OFF "$@"
cmake --build "$B" --target kogpt2d kogpt2 --parallel "$(nproc)"
mkdir -p "$PREFIX/bin" "$PREFIX/share/kogpt2/models"
install -m 0755 "$B/kogpt2d" "$B/kogpt2" "$PREFIX/bin/"
rm -rf "$PREFIX/share/kogpt2/web" "$PREFIX/share/kogpt2/models/default"
cp -R "$SRC/web" "$PREFIX/share/kogpt2/web"
cp -RL "$SRC/models/default" "$PREFIX/share/kogpt2/models/default"
# Smoke test of what was installed: explicit paths, so a fallback to the source tree
# cannot hide a missing file.
"$PREFIX/bin/kogpt2d" --help >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18399)
"$PREFIX/bin/kogpt2d" --model "$PREFIX/share/kogpt2/models/default" \
  --web-dir "$PREFIX/share/kogpt2/web" --port "$port" --quiet &
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
echo "docker/build.sh: installed into $PREFIX (kogpt2d ready on the installed model)"
