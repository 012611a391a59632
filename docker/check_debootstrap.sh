#!/usr/bin/env bash
# Proves docker/Dockerfile's package lists are complete, without Docker (issue 6):
#   sudo docker/check_debootstrap.sh [--keep]
# 1. debootstrap makes a fresh Debian 12 (bookworm, minbase) root under /tmp, with the same
#    Debian mirror this machine's apt uses (/etc/apt/sources.list{,.d/*}).
# 2. Build root (a copy of it): installs ONLY the packages the Dockerfile's build stage lists
#    (read from the Dockerfile itself), copies the source tree in and runs docker/build.sh
#    exactly as the Dockerfile does (which builds, installs into /opt/kogpt2 and smoke-tests).
# 3. Runtime root (a second, untouched copy): installs ONLY the runtime stage's packages,
#    copies /opt/kogpt2 in, checks ldd finds every library, runs the CLI, starts kogpt2d as
#    user 10001 (as the image does), and checks /healthz (with the image's HEALTHCHECK
#    command), /readyz, a /v1/next-token answer and that SIGTERM exits 0.
# Not part of ctest/CI: it needs root, network access to the Debian mirror and ~10-20 min.
# The roots are deleted on exit (after unmounting /proc) unless --keep is given.
# Env: KG_DEBIAN_MIRROR (default: this machine's), KG_DEBIAN_SUITE (bookworm),
#      KG_TREE: head+docker (default: the committed tree, git archive HEAD, with this
#      checkout's docker/ over it, so uncommitted image changes are what is tested), head
#      (git archive HEAD only) or worktree (tracked + untracked, not ignored, files, as
#      `docker build` would see them, others' unfinished edits included);
#      KG_JOBS (2), KG_DOCKERFILE (docker/Dockerfile).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
KEEP=0
[ "${1:-}" = --keep ] && KEEP=1
DOCKERFILE=${KG_DOCKERFILE:-$SRC/docker/Dockerfile}
SUITE=${KG_DEBIAN_SUITE:-bookworm}
JOBS=${KG_JOBS:-2}
TREE=${KG_TREE:-head+docker}
T0=$SECONDS
say() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*"; }
die() { say "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount)"

# --- the package lists, from the Dockerfile itself ------------------------------------------
# Prints the words after "apt-get install" (options dropped) in stage $1 (1 = first FROM).
stage_packages() {
  awk -v want="$1" '
    /^FROM[ \t]/ { stage++ }
    stage != want { next }
    {
      l = $0; cont = sub(/\\[ \t]*$/, "", l); buf = buf " " l
      if (cont) next
      if (buf ~ /apt-get install/) {
        s = buf; sub(/.*apt-get install/, "", s); sub(/&&.*/, "", s)
        n = split(s, w, /[ \t]+/)
        for (i = 1; i <= n; i++) if (w[i] != "" && w[i] !~ /^-/) print w[i]
      }
      buf = ""
    }' "$DOCKERFILE"
}
mapfile -t BUILD_PKGS < <(stage_packages 1)
mapfile -t RUN_PKGS < <(stage_packages 2)
[ ${#BUILD_PKGS[@]} -gt 0 ] || die "no build packages found in $DOCKERFILE"
[ ${#RUN_PKGS[@]} -gt 0 ] || die "no runtime packages found in $DOCKERFILE"
say "build stage packages: ${BUILD_PKGS[*]}"
say "runtime stage packages: ${RUN_PKGS[*]}"

# --- the mirror this machine uses --------------------------------------------------------
# First Debian (non-security) and security URIs in deb822 (URIs:) or one-line (deb URI) form.
apt_uris() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    sed -n -E 's/^[[:space:]]*URIs:[[:space:]]*//p; s/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p' "$f"
  done | tr ' ' '\n' | grep -E '^https?://' || true
}
MIRROR=${KG_DEBIAN_MIRROR:-$(apt_uris | grep -E '/debian/?$' | head -n1)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=$(apt_uris | grep -E '/debian-security/?$' | head -n1)
SECURITY=${SECURITY:-http://deb.debian.org/debian-security}
say "mirror: $MIRROR (security: $SECURITY), suite $SUITE"

if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

# --- work area, mounts and cleanup --------------------------------------------------------
W=$(mktemp -d /tmp/kg-debootstrap.XXXXXX)
LOGS=$W/logs
mkdir -p "$LOGS"
DAEMON_PID=
unmount_all() {  # every mount under $W, deepest first
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done < <(awk -v w="$W/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r)
}
cleanup() {
  local rc=$?
  [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
  unmount_all
  if [ $rc -ne 0 ]; then
    for f in "$LOGS"/*.log; do
      [ -s "$f" ] && { echo "--- last lines of $(basename "$f")"; tail -n 25 "$f"; }
    done
  fi
  if [ $KEEP -eq 1 ]; then
    say "kept $W"
  elif awk -v w="$W/" 'index($2, w) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    say "NOT deleting $W: something is still mounted under it"
  else
    rm -rf --one-file-system "$W"
  fi
  say "total time: $((SECONDS - T0)) s; result: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs a command inside root $1 with a clean environment, like a Docker RUN.
in_root() {
  local r=$1; shift
  chroot "$r" /usr/bin/env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
prepare_root() {  # $1 = root: /proc (and /dev if debootstrap made no device nodes), DNS
  local r=$1
  mount -t proc proc "$r/proc"
  if [ ! -c "$r/dev/null" ]; then mount --bind /dev "$r/dev"; fi
  cp -L /etc/resolv.conf "$r/etc/resolv.conf"
}
apt_install() {  # $1 = root, $2 = log name, then packages; as the Dockerfile does
  local r=$1 log=$LOGS/$2.log; shift 2
  in_root "$r" apt-get update -qq >>"$log" 2>&1 || die "apt-get update in $r (see log)"
  in_root "$r" apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1 ||
    die "apt-get install $* in $r"
}

# --- 1. one fresh Debian root, copied for the build and for the runtime -------------------
say "debootstrap --variant=minbase $SUITE into $W/base"
nice debootstrap --variant=minbase "$SUITE" "$W/base" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1 ||
  die "debootstrap"
# The suites of the debian:12 image: the release, its updates and security.
rm -f "$W/base/etc/apt/sources.list"
cat >"$W/base/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
printf '#!/bin/sh\nexit 101\n' >"$W/base/usr/sbin/policy-rc.d"
chmod 0755 "$W/base/usr/sbin/policy-rc.d"
cp -a "$W/base" "$W/run"
mv "$W/base" "$W/build"
say "fresh roots ready: $(du -shx "$W/build" | cut -f1) each"

# --- 2. build root: the build stage's packages only, then docker/build.sh ----------------
B=$W/build
prepare_root "$B"
say "build root: apt-get install ${#BUILD_PKGS[@]} packages"
apt_install "$B" build-apt "${BUILD_PKGS[@]}"
mkdir -p "$B/src"
case $TREE in
  head|head+docker)
    git -C "$SRC" archive HEAD | tar -C "$B/src" -xf -
    if [ "$TREE" = head+docker ]; then
      rm -rf "$B/src/docker"
      cp -a "$SRC/docker" "$B/src/docker"
    fi ;;
  worktree)
    git -C "$SRC" ls-files -z -c -o --exclude-standard |
      tar -C "$SRC" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$B/src" -xf - ;;
  *) die "KG_TREE must be head+docker, head or worktree" ;;
esac
say "source tree ($TREE) copied: $(du -shx "$B/src" | cut -f1); running docker/build.sh (-j$JOBS)"
t=$SECONDS
in_root "$B" nice bash -c "cd /src && KG_DOCKER_BUILD_DIR=/tmp/build KG_JOBS=$JOBS docker/build.sh /opt/kogpt2" \
  >"$LOGS/build.log" 2>&1 || die "docker/build.sh in the build root"
say "build root: $(tail -n1 "$LOGS/build.log") ($((SECONDS - t)) s)"

# --- 3. runtime root: the runtime stage's packages only, then the installed tree ---------
R=$W/run
prepare_root "$R"
say "runtime root: apt-get install ${#RUN_PKGS[@]} packages"
apt_install "$R" run-apt "${RUN_PKGS[@]}"
in_root "$R" groupadd --system --gid 10001 kogpt2
in_root "$R" useradd --system --uid 10001 --gid kogpt2 --home-dir /nonexistent \
  --shell /usr/sbin/nologin kogpt2
cp -a "$B/opt/kogpt2" "$R/opt/kogpt2"
for bin in kogpt2d kogpt2; do
  missing=$(in_root "$R" ldd "/opt/kogpt2/bin/$bin" | grep 'not found' || true)
  [ -z "$missing" ] || die "$bin in the runtime root: $missing"
done
say "runtime root: ldd finds every library of kogpt2d and kogpt2"
in_root "$R" chroot --userspec=10001:10001 / /opt/kogpt2/bin/kogpt2 next \
  --model /opt/kogpt2/share/kogpt2/models/default --text "안녕하세요" --top-k 3 >"$LOGS/cli.log" 2>&1 ||
  die "kogpt2 next in the runtime root"
say "runtime root: kogpt2 next answers ($(head -c 120 "$LOGS/cli.log" | tr '\n' ' '))"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18398)
# As the image's entrypoint, but on loopback: the root shares this machine's network.
# A simple command (not the in_root function, which would run in a forked subshell), so that
# $! is kogpt2d itself once chroot and env have exec'd it, and SIGTERM reaches it.
chroot --userspec=10001:10001 "$R" /usr/bin/env -i HOME=/nonexistent LANG=C.UTF-8 \
  PATH=/usr/local/bin:/usr/bin:/bin /opt/kogpt2/bin/kogpt2d --host 127.0.0.1 \
  --port "$PORT" --timeout 5 >"$LOGS/kogpt2d.log" 2>&1 &
DAEMON_PID=$!
# The Dockerfile's HEALTHCHECK command, run inside the runtime root.
healthcheck() {
  in_root "$R" bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT && printf 'GET /$1 HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q ' 200 ' <&3" 2>/dev/null
}
up=0
for _ in $(seq 600); do
  if healthcheck healthz && healthcheck readyz; then up=1; break; fi
  kill -0 "$DAEMON_PID" 2>/dev/null || break
  sleep 0.1
done
[ $up -eq 1 ] || die "kogpt2d in the runtime root did not become healthy and ready"
say "runtime root: kogpt2d up as uid 10001; /healthz (HEALTHCHECK command) and /readyz: 200"
body='{"text": "여러분 2019년 수고하셨습니다. 올해에는", "top_k": 5}'
if command -v curl >/dev/null; then
  answer=$(curl -sS -f "http://127.0.0.1:$PORT/v1/next-token" -H 'Content-Type: application/json' -d "$body") ||
    die "/v1/next-token: $answer"
else
  answer=$(python3 - "$PORT" "$body" <<'PY'
import sys, urllib.request
r = urllib.request.Request("http://127.0.0.1:%s/v1/next-token" % sys.argv[1], sys.argv[2].encode(),
                           {"Content-Type": "application/json"})
print(urllib.request.urlopen(r, timeout=30).read().decode())
PY
) || die "/v1/next-token"
fi
case $answer in *'"candidates"'*) ;; *) die "/v1/next-token answered: $answer" ;; esac
say "runtime root: /v1/next-token: ${answer:0:160}..."
[ "$(readlink "/proc/$DAEMON_PID/exe" 2>/dev/null)" = "$R/opt/kogpt2/bin/kogpt2d" ] ||
  say "note: PID $DAEMON_PID is $(readlink "/proc/$DAEMON_PID/exe" 2>/dev/null), not kogpt2d"
kill -TERM "$DAEMON_PID"
rc=0; wait "$DAEMON_PID" || rc=$?
DAEMON_PID=
[ $rc -eq 0 ] || die "kogpt2d exited $rc after SIGTERM"
grep -q 'stopped' "$LOGS/kogpt2d.log" || die "kogpt2d did not log its drain and stop"
say "runtime root: SIGTERM -> kogpt2d drained and exited 0"
say "PASS: the Dockerfile's build packages build it, its runtime packages run it" \
  "(build root $(du -shx "$B" | cut -f1), runtime root $(du -shx "$R" | cut -f1))"
