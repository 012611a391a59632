#!/usr/bin/env bash
# Fleet test (issue 6): docker/nginx.conf, with its ports rewritten, in front of 3 kogpt2d on
# 127.0.0.1. (1) nginx -t on the config; (2) a bounded load while replicas 1 and 2 get SIGTERM
# and are started again (a rolling restart: 0 failed requests allowed), then replica 3 gets
# SIGKILL (failures reported, and nginx must go on serving from the others); (3) the k8s
# manifests (tests/deploy_k8s.py), every metric name they use checked against a live /metrics;
# (4) nginx reloaded with the shipped per-client rate (50 r/s): hammered past it, its 429s are
# JSON in OpenAI's error shape with Retry-After (issue 29); with every replica stopped, its 502
# too.
# Needs nginx (Debian's /usr/sbin/nginx), python3, curl and a built kogpt2d; else exit 77.
# Container mode (issue 19), `tests/test_deploy_fleet.sh containers` or KG_FLEET_MODE=containers:
# the replicas are containers of the image KG_IMAGE (default kogpt2d:latest, built by
# docker/test_images.sh) run by podman with --network host, nginx stays on the host; the
# rolling restart is `podman stop` (SIGTERM; the container must exit 0) + `podman start`, the
# crash `podman kill` (SIGKILL). Needs root and a podman that runs containers
# (docker/podman_setup.sh) and the image; else exit 77.
# Env: KG_BUILD_DIR (kogpt2d), KG_SOURCE_DIR, KG_PYTHON, KG_FLEET_MODE, KG_IMAGE.
set -u
SRC=${KG_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${KG_BUILD_DIR:-$SRC/build}
PY=${KG_PYTHON:-python3}
KG=$BUILD/kogpt2d
MODE=${1:-${KG_FLEET_MODE:-processes}}
IMG=${KG_IMAGE:-kogpt2d:latest}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
skip() { echo "SKIP: $*"; exit 77; }
[ -x "$NGINX" ] || skip "nginx is not installed"
case $MODE in
  processes) [ -x "$KG" ] || skip "no $KG (build it first)" ;;
  containers)
    [ "$(id -u)" = 0 ] || skip "container mode needs root"
    command -v podman >/dev/null || skip "no podman (docker/podman_setup.sh installs it)"
    podman image exists "$IMG" || skip "no image $IMG (docker/test_images.sh builds it)"
    podman run --rm --network host --entrypoint true "$IMG" >/dev/null 2>&1 ||
      skip "podman cannot run a container here (docker/podman_setup.sh says why)" ;;
  *) echo "usage: $0 [processes|containers]"; exit 2 ;;
esac
command -v "$PY" >/dev/null || skip "no python3"
command -v curl >/dev/null || skip "no curl"

T=$(mktemp -d /tmp/kg-fleet.XXXXXX)
PIDS=()
NGINX_PID=
CNAME=kg-fleet-$$-   # container names: kg-fleet-PID-1..3
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null
  for p in "${PIDS[@]}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  if [ "$MODE" = containers ]; then
    for i in 1 2 3; do podman rm -f -t 0 "$CNAME$i" >/dev/null 2>&1; done
  fi
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT

# Free ports: nginx + 3 replicas.
read -r NPORT P1 P2 P3 < <("$PY" - <<'PY'
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
PY
)
PORTS=("" "$P1" "$P2" "$P3")

# (1) nginx -t on the shipped config, adapted: replica addresses, listen port, pid, logs,
# temporary paths inside the temp prefix, and (for the load) a rate limit the single test client
# stays under; nginx_conf shipped keeps the shipped rate.
mkdir -p "$T/logs"
nginx_conf() {  # [shipped]
  local rate=(-e "s/rate=50r\/s/rate=100000r\/s/")
  [ "${1:-}" = shipped ] && rate=()
  sed -e "s/kogpt2d-1:8080/127.0.0.1:$P1/; s/kogpt2d-2:8080/127.0.0.1:$P2/; s/kogpt2d-3:8080/127.0.0.1:$P3/" \
      -e "s/listen 8080;/listen 127.0.0.1:$NPORT;/" \
      -e "s#^pid .*#pid $T/nginx.pid;#" \
      -e "s#error_log /dev/stderr#error_log $T/logs/error.log#" \
      -e "s#access_log /dev/stdout#access_log $T/logs/access.log#" \
      "${rate[@]}" \
      -e "s#^http {#http {\n    client_body_temp_path $T/body; proxy_temp_path $T/proxy;\n    fastcgi_temp_path $T/fcgi; uwsgi_temp_path $T/uwsgi; scgi_temp_path $T/scgi;#" \
      "$SRC/docker/nginx.conf" > "$T/nginx.conf"
}
nginx_conf
if ! "$NGINX" -t -q -p "$T" -e "$T/logs/error.log" -c "$T/nginx.conf"; then
  echo "FAIL: nginx -t on docker/nginx.conf"; cat "$T/logs/error.log"; exit 1
fi
echo "ok: nginx -t passes on docker/nginx.conf ($("$NGINX" -v 2>&1))"

# A replica: a process, or a container of $IMG (podman without systemd says it cannot
# schedule the HEALTHCHECK's timer: that line is dropped).
nosd() { grep -v 'systemd connection' >&2; }
start_replica() {  # $1 = 1..3; a stopped container is started again (podman start)
  if [ "$MODE" = containers ]; then
    if podman container exists "$CNAME$1"; then
      podman start "$CNAME$1" 2> >(nosd) >/dev/null
    else
      podman run -d --name "$CNAME$1" --network host "$IMG" --host 127.0.0.1 \
        --port "${PORTS[$1]}" --threads 2 --timeout 5 --quiet 2> >(nosd) >/dev/null
    fi
    return
  fi
  "$KG" --host 127.0.0.1 --port "${PORTS[$1]}" --threads 2 --timeout 5 --quiet \
    >>"$T/kg$1.log" 2>&1 &
  PIDS[$1]=$!
}
replica_log() {  # $1 = 1..3
  if [ "$MODE" = containers ]; then podman logs "$CNAME$1" 2>&1 | tail -20; else cat "$T/kg$1.log"; fi
}
stop_replica() {  # $1 = 1..3: SIGTERM, wait; returns the exit status
  if [ "$MODE" = containers ]; then
    podman stop -t 30 "$CNAME$1" 2> >(nosd) >/dev/null
    return "$(podman inspect --format '{{.State.ExitCode}}' "$CNAME$1")"
  fi
  kill -TERM "${PIDS[$1]}"
  wait "${PIDS[$1]}"
}
kill_replica() {  # $1 = 1..3: SIGKILL
  if [ "$MODE" = containers ]; then
    podman kill "$CNAME$1" 2> >(nosd) >/dev/null
    return
  fi
  kill -KILL "${PIDS[$1]}"; wait "${PIDS[$1]}" 2>/dev/null; PIDS[$1]=
}
wait_ready() {  # $1 = 1..3; up to 30 s
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:${PORTS[$1]}/readyz" >/dev/null && return 0
    sleep 0.1
  done
  echo "FAIL: replica $1 not ready"; replica_log "$1"; exit 1
}
for i in 1 2 3; do start_replica $i; done
for i in 1 2 3; do wait_ready $i; done
"$NGINX" -p "$T" -e "$T/logs/error.log" -c "$T/nginx.conf" -g "daemon off;" &
NGINX_PID=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$NPORT/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$NPORT/readyz" >/dev/null || { echo "FAIL: nginx not serving"; cat "$T/logs/error.log"; exit 1; }
echo "fleet ($MODE): nginx :$NPORT -> kogpt2d :$P1 :$P2 :$P3"

# (2) Load through nginx; the phase file labels each request with the event under way.
SECS=${KG_FLEET_SECONDS:-60}   # an upper bound; the test stops the load itself
echo steady > "$T/phase"
"$PY" "$SRC/tests/deploy_fleet.py" load "http://127.0.0.1:$NPORT" "$SECS" 4 "$T/phase" > "$T/load.out" &
LOAD_PID=$!
sleep 2
for i in 1 2; do
  echo "rolling-restart" > "$T/phase"
  stop_replica $i; rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: replica $i exited $rc after SIGTERM"; exit 1; }
  start_replica $i
  wait_ready $i
  if [ "$MODE" = containers ]; then
    echo "replica $i: podman stop, exit 0, podman start, ready"
  else
    echo "replica $i: SIGTERM, exit 0, restarted and ready"
  fi
  sleep 2
done
echo "sigkill" > "$T/phase"
kill_replica 3
if [ "$MODE" = containers ]; then echo "replica 3: podman kill (SIGKILL)"; else echo "replica 3: SIGKILL"; fi
sleep 3
echo "after-sigkill" > "$T/phase"
sleep 3
echo stop > "$T/phase"
wait $LOAD_PID
cat "$T/load.out"
fail=0
rr_sent=0; rr_failed=0; total=0; total_failed=0
while read -r ph sent failed; do
  [ "$ph" = error ] && continue
  total=$((total + sent)); total_failed=$((total_failed + failed))
  case $ph in
    steady|rolling-restart) rr_sent=$((rr_sent + sent)); rr_failed=$((rr_failed + failed)) ;;
    sigkill) kill_sent=$sent; kill_failed=$failed ;;
    after-sigkill) after_sent=$sent; after_failed=$failed ;;
  esac
done < "$T/load.out"
echo "figures: requests sent $total; before/during the rolling restart: $rr_sent sent, $rr_failed failed;"
echo "         in the 3 s after SIGKILL of replica 3: ${kill_sent:-0} sent, ${kill_failed:-0} failed;"
echo "         after that (2 replicas): ${after_sent:-0} sent, ${after_failed:-0} failed"
[ "$rr_failed" -eq 0 ] || { echo "FAIL: $rr_failed requests failed during the rolling restart"; fail=1; }
# shellcheck disable=SC2015  # the echo cannot fail; either test failing means FAIL
[ "${after_sent:-0}" -gt 0 ] && [ "${after_failed:-0}" -eq 0 ] ||
  { echo "FAIL: nginx did not move on after SIGKILL"; fail=1; }
[ "$rr_sent" -gt 0 ] || { echo "FAIL: no requests sent"; fail=1; }
echo "nginx error log (distinct messages):"
sed -E 's/^[0-9\/: ]+\[[a-z]+\] [0-9#]+: \*[0-9]+ //; s/, client:.*upstream: "([^"]*)".*/ (\1)/' "$T/logs/error.log" |
  sed -E 's/127\.0\.0\.1:[0-9]+/127.0.0.1:PORT/g' | sort | uniq -c | sort -rn | head -8

# (3) The k8s manifests; every metric name they use against a live /metrics.
rc=0; "$PY" "$SRC/tests/deploy_fleet.py" k8s "$SRC/docker" "http://127.0.0.1:$P1/metrics" || rc=$?
[ $rc -eq 77 ] && echo "k8s manifests: not checked here (above); test_deploy_manifests says so too"
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail=1

# (4) nginx's own errors. Reloaded (SIGHUP) with the shipped rate, 16 clients past it: JSON
# 429s with Retry-After. Then, the limiter's burst drained, every replica stopped: a JSON 502.
nginx_conf shipped
kill -HUP "$NGINX_PID"
sleep 1   # the new workers take over
"$PY" "$SRC/tests/deploy_fleet.py" ratelimit "http://127.0.0.1:$NPORT" || fail=1
sleep 3   # the burst (100) drains at 50 r/s
for i in 1 2; do stop_replica $i; done
"$PY" "$SRC/tests/deploy_fleet.py" nginx-error "http://127.0.0.1:$NPORT" 502 || fail=1
[ $fail -eq 0 ] && echo "PASS: test_deploy_fleet ($MODE)"
exit $fail
