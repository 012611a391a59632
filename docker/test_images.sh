#!/usr/bin/env bash
# Builds an image from this checkout with its real Dockerfile (Debian's podman, no Docker engine,
# no registry) and tests it as an operator would (issues 19 and 29). As root:
#   docker/test_images.sh [cpu]      docker/Dockerfile -> kogpt2d:latest
#   docker/test_images.sh cuda       docker/stage_cuda.sh (the CUDA build, or the install in
#                                    KG_CUDA_PREFIX) -> docker/Dockerfile.cuda -> kogpt2d:cuda
# Both set up podman first (docker/podman_setup.sh). Checks: the image's user is not root and its
# process runs as uid 10001; /readyz turns 200; the Explorer page and a /v1/next-token answer
# come back; `podman healthcheck run` (the image's HEALTHCHECK, inside the container) passes;
# `podman stop` (SIGTERM) lets two streams in flight finish and the container exits 0;
# `--read-only` serves; a model mounted from the host with `--model` serves; started as
# SageMaker starts it (`IMAGE serve`, /opt/ml/model, -p 8080) /ping and /invocations answer.
# The CUDA image also: it carries the CUDA runtime, cuBLAS and cuBLASLt and nothing else of the toolkit (no nvcc, no
# static library) and libkgcuda.so finds them (the programs link none of them); run without a GPU (no --gpus: none is
# given to the container, whatever this machine has) it serves on the CPU, its device line says there is no GPU, and
# kogpt2d maps no CUDA library. Prints the image's size, layers and build time; fails above KG_IMAGE_MAX_MB (default 200
# for the CPU image, 850 for the CUDA one: its cuBLASLt alone is 540 MB).
# Env: KG_IMAGE (default kogpt2d:latest or kogpt2d:cuda), KG_IMAGE_MAX_MB, KG_IMAGE_NO_BUILD=1
# (test the image already tagged KG_IMAGE), KG_CUDA_PREFIX (cuda: stage this install instead of
# building; CI passes ctest's), CUDA_HOME. Exit 0 pass, 1 fail, 77 skip (podman cannot run here;
# cuda: no CUDA toolkit).
# shellcheck disable=SC2015  # ok and bad only echo: "check && ok || bad" is if-then-else here
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
KIND=${1:-cpu}
case $KIND in
  cpu) IMG=${KG_IMAGE:-kogpt2d:latest}; MAX_MB=${KG_IMAGE_MAX_MB:-200} ;;
  cuda) IMG=${KG_IMAGE:-kogpt2d:cuda}; MAX_MB=${KG_IMAGE_MAX_MB:-850}
    CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    if [ "${KG_IMAGE_NO_BUILD:-0}" != 1 ]; then
      # stage_cuda.sh needs the toolkit's libraries, and nvcc unless it stages an install
      [ -d "$CUDA_HOME/lib64" ] && { [ -x "$CUDA_HOME/bin/nvcc" ] || [ -n "${KG_CUDA_PREFIX:-}" ]; } ||
        { echo "SKIP: test_images cuda: no CUDA toolkit in $CUDA_HOME (set CUDA_HOME)"; exit 77; }
    fi ;;
  *) echo "usage: docker/test_images.sh [cpu|cuda]" >&2; exit 2 ;;
esac
"$SRC/docker/podman_setup.sh"
rc=$?
[ $rc -eq 0 ] || exit $rc
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }

fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
T=$(mktemp -d /tmp/kg-images.XXXXXX)
NAMES=()
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  for n in "${NAMES[@]}"; do podman rm -f -t 0 "$n" >/dev/null 2>&1; done
  rm -rf "$T"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# run NAME PORT [podman run options...] -- [kogpt2d arguments...]: a detached container
run() {
  local name=$1 port=$2; shift 2
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  podman rm -f -t 0 "$name" >/dev/null 2>&1
  NAMES+=("$name")
  # (podman without systemd logs that it cannot schedule the HEALTHCHECK timer: dropped)
  podman run -d --name "$name" --network host "${opts[@]}" "$IMG" --port "$port" --threads 2 "$@" \
    2> >(grep -v 'systemd connection' >&2) >/dev/null
}
ready() {  # $1 port; up to 60 s
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz")" = 200 ] && return 0
    sleep 0.1
  done
  return 1
}
next_token() {  # $1 port: a /v1/next-token answer with candidates
  curl -sf -H 'Content-Type: application/json' -X POST "http://127.0.0.1:$1/v1/next-token" \
    -d '{"text":"여러분 2019년 수고하셨습니다. 올해에는","top_k":5}' | grep -q '"candidates"'
}
logs() { podman logs "$1" 2>&1 | tail -20; }

# 1. Build, timed; the size.
if [ "${KG_IMAGE_NO_BUILD:-0}" != 1 ]; then
  t0=$(date +%s)
  if [ "$KIND" = cuda ]; then
    # The context is the staging folder (docker/stage_cuda.sh), not the checkout.
    echo "== docker/stage_cuda.sh, then podman build -f docker/Dockerfile.cuda -t $IMG (runtime stage's apt-get needs the network: host)"
    if ! "$SRC/docker/stage_cuda.sh" "$T/stage" > "$T/stage.log" 2>&1; then
      tail -30 "$T/stage.log"; echo "FAIL: docker/stage_cuda.sh"; exit 1
    fi
    tail -1 "$T/stage.log"
    ctx=("$T/stage")
  else
    echo "== podman build -f docker/Dockerfile -t $IMG (build stage needs the network: host)"
    ctx=(--ignorefile "$SRC/docker/Dockerfile.dockerignore" "$SRC")
  fi
  dockerfile=$SRC/docker/Dockerfile; [ "$KIND" = cuda ] && dockerfile=$SRC/docker/Dockerfile.cuda
  if ! podman build --network host --format docker -f "$dockerfile" -t "$IMG" "${ctx[@]}" \
      > "$T/build.log" 2>&1; then
    tail -40 "$T/build.log"; echo "FAIL: podman build"; exit 1
  fi
  echo "built $IMG in $(($(date +%s) - t0)) s"
  rm -rf "$T/stage"
  # Dangling images of earlier builds of this tag (the layer cache stays for the next build).
  podman image prune -f >/dev/null 2>&1
fi
size=$(podman image inspect --format '{{.Size}}' "$IMG") || { echo "FAIL: no image $IMG"; exit 1; }
mb=$((size / 1000000))
echo "image $IMG: $mb MB ($size bytes); layers:"
podman history --format '  {{.Size}}	{{.CreatedBy}}' "$IMG" | grep -v '^  0 B' | cut -c1-110
[ "$mb" -le "$MAX_MB" ] && ok "image size $mb MB <= $MAX_MB MB" || bad "image size $mb MB > $MAX_MB MB"

# 2. The image's configuration: non-root user, HEALTHCHECK kept (docker format), port 8080.
user=$(podman image inspect --format '{{.Config.User}}' "$IMG")
case ${user%%:*} in ''|0|root) bad "image user '$user' is root" ;; *) ok "image user $user" ;; esac
hc=$(podman image inspect "$IMG" | python3 -c 'import json, sys; print(json.load(sys.stdin)[0].get("Healthcheck"))')
case $hc in *healthz*) ok "HEALTHCHECK in the image" ;; *) bad "no HEALTHCHECK in the image ($hc)" ;; esac

# 2b. The CUDA image's libraries: the three from the toolkit, found by the binaries; nothing
# else of the toolkit.
if [ "$KIND" = cuda ]; then
  # shellcheck disable=SC2016  # expanded inside the container
  inside=$(podman run --rm --network host --entrypoint bash "$IMG" -c '
    echo "libs: $(cd /usr/local/cuda/lib64 && ls | tr "\n" " ")"
    echo "ldd: $(ldd /opt/kogpt2/bin/libkgcuda.so | awk "/libcu/ {print \$1 \"=>\" \$3}" | tr "\n" " ")"
    echo "programs: $(ldd /opt/kogpt2/bin/kogpt2d /opt/kogpt2/bin/kogpt2 | grep -c libcu)"
    echo "nvcc: $(command -v nvcc || echo none)"
    echo "static: $(find / -xdev \( -name "*.a" -o -name "libcuda.so*" \) 2>/dev/null | grep -c .)"
    echo "env: $NVIDIA_DRIVER_CAPABILITIES $NVIDIA_REQUIRE_CUDA"' 2>&1 | grep -v 'systemd connection')
  while IFS= read -r line; do echo "  $line"; done <<< "$inside"
  [[ $inside =~ libs:\ libcublas\.so\.[0-9]+\ libcublasLt\.so\.[0-9]+\ libcudart\.so\.[0-9]+\ $'\n' ]] &&
    ok "CUDA libraries: cudart, cuBLAS, cuBLASLt only" || bad "CUDA libraries in the image"
  n=$(grep -o '=>/usr/local/cuda/lib64/' <<< "$inside" | wc -l)
  [ "$n" = 3 ] && ok "libkgcuda.so finds the three in /usr/local/cuda/lib64" || bad "ldd: $n of 3 CUDA libraries found"
  [[ $inside == *"programs: 0"* ]] && ok "kogpt2d and kogpt2 link none of them (libkgcuda.so is opened for a GPU)" ||
    bad "a program links a CUDA library"
  [[ $inside == *"nvcc: none"* && $inside == *"static: 0"* ]] &&
    ok "no nvcc, no static library, no libcuda (the driver's, mounted at run time)" ||
    bad "toolkit pieces or a libcuda in the image"
fi

# 3. Serve: readyz, uid, Explorer, next-token, the HEALTHCHECK inside the container.
P=$(free_port)
run kg-img-serve "$P" -- --timeout 30
if ready "$P"; then ok "/readyz 200 (podman run --network host $IMG --port $P)"; else bad "/readyz never 200"; logs kg-img-serve; fi
if [ "$KIND" = cuda ]; then
  # No --gpus: the container sees no GPU and kogpt2d (--device auto) says so and runs on the CPU
  # (matched loosely: a line saying "no GPU", and the device or ready line naming a CPU).
  log=$(podman logs kg-img-serve 2>&1)
  nogpu=$(grep -i -m1 'no gpu' <<< "$log")
  oncpu=$(grep -iE 'device|ready' <<< "$log" | grep -i -m1 'cpu')
  echo "  ${nogpu:-(no line says no GPU)}"
  [ -n "$nogpu" ] && [ -n "$oncpu" ] && ok "no GPU: the CPU fallback, said plainly" ||
    bad "no GPU line or no CPU device in the log: $(head -5 <<< "$log")"
  # on the CPU the CUDA runtime and cuBLAS stay unmapped (the kernel's list of kogpt2d's maps)
  maps=$(podman exec kg-img-serve cat /proc/1/maps 2>/dev/null | grep -cE 'libcudart|libcublas|libkgcuda')
  rss=$(podman exec kg-img-serve sh -c 'grep VmRSS /proc/1/status' 2>/dev/null | awk '{print int($2 / 1024)}')
  [ "$maps" = 0 ] && ok "the CPU fallback maps no CUDA library (kogpt2d's RSS: ${rss:-?} MiB)" ||
    bad "the CPU fallback maps $maps CUDA library mappings"
fi
uid=$(podman exec kg-img-serve sh -c 'id -u; cat /proc/1/status' 2>/dev/null | awk 'NR == 1 {print} /^Uid:/ {print $2}' | sort -u | tr '\n' ' ')
[ "$uid" = "10001 " ] && ok "kogpt2d (PID 1) and podman exec run as uid 10001" || bad "uid: '$uid'"
page=$(curl -sf "http://127.0.0.1:$P/")
[[ $page == *"<html"* ]] && ok "Explorer page (GET /)" || bad "no Explorer page at /"
curl -sf -o /dev/null "http://127.0.0.1:$P/app.js" && ok "Explorer's app.js" || bad "no /app.js"
next_token "$P" && ok "/v1/next-token answers" || bad "/v1/next-token"
out=$(podman healthcheck run kg-img-serve 2>&1); hrc=$?
out=$(grep -v 'systemd connection' <<<"$out")
if [ $hrc -eq 0 ]; then ok "podman healthcheck run: ${out:-healthy} (exit 0)"
else bad "podman healthcheck run: exit $hrc: $out"; fi

# 4. podman stop (SIGTERM) drains the streams in flight; the container exits 0.
for i in 1 2; do
  curl -sN -H 'Content-Type: application/json' -X POST "http://127.0.0.1:$P/v1/generate" \
    -d "{\"text\":\"안녕\",\"max_tokens\":500,\"ignore_eos\":true,\"seed\":$i,\"stream\":true}" \
    > "$T/stream$i" &
done
for _ in $(seq 100); do [ -s "$T/stream1" ] && [ -s "$T/stream2" ] && break; sleep 0.02; done
inflight=$(cat "$T/stream1" "$T/stream2" | grep -c generated_tokens)
podman stop -t 30 kg-img-serve 2>&1 >/dev/null | grep -v 'systemd connection' >&2
wait
code=$(podman inspect --format '{{.State.ExitCode}}' kg-img-serve)
done_n=$(cat "$T/stream1" "$T/stream2" | grep -c '"generated_tokens":500')
if [ "$inflight" = 0 ] && [ "$done_n" = 2 ]; then ok "podman stop: 2 streams in flight finished (500 tokens each)"
else bad "podman stop: in flight before: $((2 - inflight)), complete after: $done_n"; fi
[ "$code" = 0 ] && ok "exit code 0 after podman stop" || { bad "exit code $code after podman stop"; logs kg-img-serve; }
log=$(podman logs kg-img-serve 2>&1)
[[ $log == *draining* ]] && ok "kogpt2d logged the drain" || bad "no drain in the log"

# 5. A read-only root filesystem.
P=$(free_port)
run kg-img-ro "$P" --read-only -- 
if ready "$P" && next_token "$P"; then ok "--read-only: ready and answering"; else bad "--read-only"; logs kg-img-ro; fi
podman rm -f -t 0 kg-img-ro >/dev/null 2>&1

# 6. A model mounted from the host (read-only) with --model.
mkdir -p "$T/mymodel" && cp -L "$SRC"/models/default/* "$T/mymodel/" && chmod -R a+rX "$T"
P=$(free_port)
run kg-img-model "$P" -v "$T/mymodel:/models/mine:ro" -- --model /models/mine
if ready "$P" && next_token "$P"; then ok "--model /models/mine (mounted from the host): ready and answering"
else bad "--model /models/mine"; logs kg-img-model; fi
curl -s "http://127.0.0.1:$P/v1/models" | grep -q '"id":"mine"' && ok "/v1/models names it: mine" ||
  bad "/v1/models does not name the mounted model"
podman rm -f -t 0 kg-img-model >/dev/null 2>&1

# 7. As SageMaker starts it: `IMAGE serve`, the model in /opt/ml/model, port 8080 published;
# /ping turns 200, /invocations answers TGI's form ([{generated_text}]) and a chat body.
P=$(free_port)
podman rm -f -t 0 kg-img-sm >/dev/null 2>&1
NAMES+=(kg-img-sm)
podman run -d --name kg-img-sm -p "127.0.0.1:$P:8080" -v "$T/mymodel:/opt/ml/model:ro" "$IMG" \
  serve 2> >(grep -v 'systemd connection' >&2) >/dev/null
for _ in $(seq 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P/ping")" = 200 ] && break
  sleep 0.1
done
if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P/ping")" = 200 ]; then
  ok "SageMaker: IMAGE serve: /ping 200 on port 8080"
else bad "SageMaker: /ping never 200"; logs kg-img-sm; fi
inv() { curl -sf -H 'Content-Type: application/json' -X POST "http://127.0.0.1:$P/invocations" -d "$1"; }
inv '{"inputs":"오늘 날씨는","parameters":{"max_new_tokens":4}}' | grep -q '^\[{"generated_text":' &&
  ok "SageMaker: /invocations {inputs, parameters} -> [{generated_text}]" ||
  bad "SageMaker: /invocations TGI form"
inv '{"messages":[{"role":"user","content":"안녕"}],"max_tokens":4}' | grep -q '"chat.completion"' &&
  ok "SageMaker: /invocations {messages} -> chat.completion" || bad "SageMaker: /invocations chat"
curl -s "http://127.0.0.1:$P/v1/models" | grep -q '"id":"model"' &&
  ok "SageMaker: serves /opt/ml/model" || bad "SageMaker: not serving /opt/ml/model"
podman rm -f -t 0 kg-img-sm >/dev/null 2>&1

if [ $fails -eq 0 ]; then echo "PASS: docker/test_images.sh $KIND ($IMG, $mb MB)"; exit 0; fi
echo "FAIL: docker/test_images.sh: $fails checks failed"
exit 1
