#!/usr/bin/env bash
# Builds the CPU image from this checkout with the real docker/Dockerfile (Debian's podman,
# no Docker engine, no registry) and tests it as an operator would (issue 19). As root:
#   docker/test_images.sh            set up podman (docker/podman_setup.sh), build, test
# Checks: the image's user is not root and its process runs as uid 10001; /readyz turns 200;
# the Explorer page and a /v1/next-token answer come back; `podman healthcheck run` (the
# image's HEALTHCHECK, inside the container) passes; `podman stop` (SIGTERM) lets two streams
# in flight finish and the container exits 0; `--read-only` serves; a model mounted from the
# host with `--model` serves. Prints the image's size and build time; fails above
# KG_IMAGE_MAX_MB (default 200).
# Env: KG_IMAGE (default kogpt2d:latest), KG_IMAGE_MAX_MB, KG_IMAGE_NO_BUILD=1 (test the
# image already tagged KG_IMAGE). Exit 0 pass, 1 fail, 77 skip (podman cannot run here).
# shellcheck disable=SC2015  # ok and bad only echo: "check && ok || bad" is if-then-else here
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
IMG=${KG_IMAGE:-kogpt2d:latest}
MAX_MB=${KG_IMAGE_MAX_MB:-200}
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
  echo "== podman build -f docker/Dockerfile -t $IMG (build stage needs the network: host)"
  t0=$(date +%s)
  if ! podman build --network host --format docker --ignorefile "$SRC/docker/Dockerfile.dockerignore" \
      -f "$SRC/docker/Dockerfile" -t "$IMG" "$SRC" > "$T/build.log" 2>&1; then
    tail -40 "$T/build.log"; echo "FAIL: podman build"; exit 1
  fi
  echo "built $IMG in $(($(date +%s) - t0)) s"
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

# 3. Serve: readyz, uid, Explorer, next-token, the HEALTHCHECK inside the container.
P=$(free_port)
run kg-img-serve "$P" -- --timeout 30
if ready "$P"; then ok "/readyz 200 (podman run --network host $IMG --port $P)"; else bad "/readyz never 200"; logs kg-img-serve; fi
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

if [ $fails -eq 0 ]; then echo "PASS: docker/test_images.sh ($IMG, $mb MB)"; exit 0; fi
echo "FAIL: docker/test_images.sh: $fails checks failed"
exit 1
