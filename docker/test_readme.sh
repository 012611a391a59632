#!/usr/bin/env bash
# Runs the README's first command verbatim, as a new user would on a fresh Debian 12 as root
# (no sudo there), in a debian:12 container (issue 19, item 6). As root:
#   docker/test_readme.sh
# The container gets this checkout as a fresh clone has it: the files git tracks plus the
# untracked ones it does not ignore (no build*/, no node_modules), copied to /root/kogpt2.
# KG_TREE=head takes `git archive HEAD` instead (what a clone of the last commit has).
# The first line of README.md's first ```sh block runs there with `bash -c`, from the
# checkout, as printed (kogpt2d stays in the foreground, so it runs detached with
# `podman exec -d`). The container has its own network namespace (slirp4netns: its apt-get
# and curl reach the mirror; its 127.0.0.1:8080 is its own, so a port in use on the host does
# not matter), and the host asks kogpt2d there with its own curl inside that namespace
# (nsenter -n). Checks: /readyz turns 200, /v1/next-token answers with candidates, SIGTERM to
# kogpt2d ends the command with exit 0. Prints how long the command took to become ready.
# Env: KG_TREE=head, KG_README_TIMEOUT (seconds until ready, default 1500).
# Exit 0 pass, 1 fail, 77 skip (podman cannot run containers here, or no base image).
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
TIMEOUT=${KG_README_TIMEOUT:-1500}
NAME=kg-readme-$$
"$SRC/docker/podman_setup.sh" # its SKIP line says why when it exits 77
rc=$?
[ $rc -eq 0 ] || exit $rc
podman image exists debian:12 || { echo "SKIP: test_readme: no debian:12 image"; exit 77; }
for t in curl nsenter git; do
  command -v $t >/dev/null || { echo "SKIP: test_readme: no $t"; exit 77; }
done

# The README's first line: the first line of its first ```sh block, as printed (in the tree
# that is tested: HEAD's README with KG_TREE=head).
if [ "${KG_TREE:-}" = head ]; then readme=$(git -C "$SRC" show HEAD:README.md); else readme=$(cat "$SRC/README.md"); fi
line=$(awk '/^```sh$/ { inblock = 1; next } inblock { print; exit }' <<< "$readme")
case $line in
  *kogpt2d*) echo "README, first line: $line" ;;
  *) echo "FAIL: README.md's first sh block does not start kogpt2d: '$line'"; exit 1 ;;
esac

T=$(mktemp -d /tmp/kg-readme.XXXXXX)
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  podman rm -f -t 0 "$NAME" >/dev/null 2>&1
  rm -rf "$T"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "-- the command's output (last 30 lines):"
  podman exec "$NAME" tail -30 /root/readme.log 2>/dev/null
  exit 1
}

# The tree, as a fresh clone has it.
cd "$SRC" || exit 1
if [ "${KG_TREE:-}" = head ]; then
  git archive --format=tar HEAD > "$T/tree.tar" || exit 1
else
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null --no-recursion -cf "$T/tree.tar" -T - || exit 1
fi
echo "tree: $(($(stat -c %s "$T/tree.tar") / 1000000)) MB (${KG_TREE:-worktree})"

# A fresh debian:12, running as root, with the tree in /root/kogpt2.
podman run -d --name "$NAME" --network slirp4netns --user root debian:12 sleep infinity \
  >/dev/null || exit 1
podman exec -i "$NAME" bash -c 'mkdir /root/kogpt2 && tar -C /root/kogpt2 -xf -' < "$T/tree.tar" ||
  fail "copying the tree in"
podman exec "$NAME" bash -c 'command -v sudo' >/dev/null && fail "the image has sudo: not a fresh Debian"
pid=$(podman inspect -f '{{.State.Pid}}' "$NAME")
in_ns() { nsenter -t "$pid" -n "$@"; }

# The line, verbatim; its exit code lands in /root/readme.rc.
t0=$(date +%s)
# shellcheck disable=SC2016  # expanded inside the container
podman exec -d -e KG_LINE="$line" -w /root/kogpt2 "$NAME" \
  bash -c 'bash -c "$KG_LINE" > /root/readme.log 2>&1; echo $? > /root/readme.rc' >/dev/null ||
  fail "podman exec"
ready=0 deps_s=
while [ $(($(date +%s) - t0)) -lt "$TIMEOUT" ]; do
  code=$(in_ns curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/readyz)
  [ "$code" = 200 ] && { ready=1; break; }
  if [ -z "$deps_s" ] && podman exec "$NAME" grep -q '^deps: ok' /root/readme.log 2>/dev/null; then
    deps_s=$(($(date +%s) - t0))
  fi
  if podman exec "$NAME" test -e /root/readme.rc; then
    fail "the command ended (exit $(podman exec "$NAME" cat /root/readme.rc)) before kogpt2d was ready"
  fi
  sleep 2
done
[ $ready = 1 ] || fail "kogpt2d not ready after $TIMEOUT s"
took=$(($(date +%s) - t0))
echo "ok: /readyz 200, $took s after the command started (deps ${deps_s:-?} s, build and start the rest)"

# what the command did: the deps lines, libmicrohttpd, ninja's last step, kogpt2d's first lines
podman exec "$NAME" grep -E '^(deps|libmicrohttpd)|^\[[0-9]+/[0-9]+\]|kogpt2d|device' /root/readme.log |
  grep -v '^\[[0-9]*/[0-9]*\] [BL]' | sed 's/^/  | /' | head -12
podman exec "$NAME" grep -E '^\[[0-9]+/[0-9]+\]' /root/readme.log | tail -1 | cut -c1-100 | sed 's/^/  | /'
out=$(in_ns curl -sf -H 'Content-Type: application/json' -X POST http://127.0.0.1:8080/v1/next-token \
  -d '{"text":"여러분 2019년 수고하셨습니다. 올해에는","top_k":5}')
case $out in
  *'"candidates"'*) echo "ok: /v1/next-token: ${out:0:120}..." ;;
  *) fail "/v1/next-token: '$out'" ;;
esac

# SIGTERM to kogpt2d (found by its name in the container's /proc): the line ends with 0.
# shellcheck disable=SC2016  # expanded inside the container
podman exec "$NAME" bash -c 'for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = kogpt2d ] && kill -TERM "${p#/proc/}"; done' ||
  fail "no kogpt2d to signal"
for _ in $(seq 300); do podman exec "$NAME" test -e /root/readme.rc && break; sleep 0.1; done
code=$(podman exec "$NAME" cat /root/readme.rc 2>/dev/null)
[ "$code" = 0 ] || fail "after SIGTERM the command exited '${code:-still running after 30 s}', not 0"
echo "ok: SIGTERM: kogpt2d exited 0"
echo "PASS: the README's first command, verbatim, as root in a fresh debian:12 (ready in $took s)"
