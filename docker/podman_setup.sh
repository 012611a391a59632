#!/usr/bin/env bash
# Makes Debian 12's podman ready to build and run docker/Dockerfile on a machine with no
# Docker engine and no registry (issue 19). Idempotent; run as root:
#   docker/podman_setup.sh          set up (what is already there is kept), then check
# What it does, each step only when needed:
#   1. apt-get installs podman buildah runc debootstrap uidmap slirp4netns fuse-overlayfs.
#   2. /etc/containers/containers.conf.d/kogpt2.conf (a drop-in; containers.conf itself is left
#      alone): default_ulimits = [] (raising RLIMIT_NOFILE is not permitted in every sandbox),
#      cgroup_manager = "cgroupfs" (no systemd), runtime = "runc" (crun refuses the hybrid
#      cgroup layout), events_logger = "file" (no journald).
#   3. The Dockerfile's base images, made here since nothing can be pulled: one
#      `debootstrap --variant=minbase bookworm` root (the variant Debian's official images are
#      made from, from the mirror this machine's apt uses; apt set to keep no .deb files or
#      package caches, as in those images), imported as debian:12, and the same
#      root with the slim images' dpkg path-excludes (no docs, man pages, locales) as
#      debian:12-slim. Images already present (made here earlier, or pulled) are kept.
#   4. Checks that a container runs; if podman cannot run one here (no user namespaces, no
#      overlay, ...) it prints SKIP and exits 77, so callers skip rather than fail.
# Exit: 0 ready; 77 skip (not root, not Debian, or containers cannot run here); 1 a real error.
set -euo pipefail
skip() { echo "SKIP: podman_setup: $*"; exit 77; }
say() { echo "podman_setup: $*"; }
[ "$(id -u)" = 0 ] || skip "needs root (run it as root or with sudo)"
[ -r /etc/debian_version ] || skip "not Debian"

# 1. packages
pkgs=(podman buildah runc debootstrap uidmap slirp4netns fuse-overlayfs)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. containers.conf drop-in (rewritten only when it differs)
conf=/etc/containers/containers.conf.d/kogpt2.conf
want='# Written by kogpt2 docker/podman_setup.sh: podman without systemd, in a sandbox.
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"'
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
  mkdir -p "${conf%/*}"
  printf '%s\n' "$want" > "$conf"
  say "wrote $conf"
fi

# 3. base images
have() { podman image exists "$1" 2>/dev/null; }
if ! have debian:12 || ! have debian:12-slim; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  mirror=${mirror:-http://deb.debian.org/debian}
  root=$(mktemp -d /var/tmp/kg-debootstrap.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  say "debootstrap --variant=minbase bookworm from $mirror (about 2 minutes)"
  t0=$(date +%s)
  debootstrap --variant=minbase bookworm "$root/r" "$mirror" > "$root/debootstrap.log" 2>&1 ||
    { tail -20 "$root/debootstrap.log"; echo "podman_setup: debootstrap failed" >&2; exit 1; }
  # Sources and clean-up as in Debian's official images: updates and security too.
  rm -f "$root/r/etc/apt/sources.list"
  cat > "$root/r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # As the official images' /etc/apt/apt.conf.d/docker-*: no .deb or pkgcache left behind.
  clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"'
  printf '%s\n' "DPkg::Post-Invoke { $clean; };" "APT::Update::Post-Invoke { $clean; };" \
    'Dir::Cache::pkgcache "";' 'Dir::Cache::srcpkgcache "";' > "$root/r/etc/apt/apt.conf.d/docker-clean"
  echo 'Acquire::Languages "none";' > "$root/r/etc/apt/apt.conf.d/docker-no-languages"
  rm -rf "$root"/r/var/cache/apt/*.bin "$root"/r/var/cache/apt/archives/*.deb \
    "$root"/r/var/lib/apt/lists/* "$root"/r/var/log/* "$root"/r/tmp/*
  if ! have debian:12; then
    tar -C "$root/r" --numeric-owner -c . |
      podman import -q --change 'CMD ["bash"]' - debian:12 >/dev/null
    say "imported debian:12"
  fi
  if ! have debian:12-slim; then
    # The slim variant: dpkg never installs docs, man pages or locales; drop those present.
    cat > "$root/r/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# as in Debian's -slim images: no documentation, man pages or translations
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
    find "$root/r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$root/r/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$root"/r/usr/share/{groff,info,linda,lintian/overrides,locale,man}/*
    tar -C "$root/r" --numeric-owner -c . |
      podman import -q --change 'CMD ["bash"]' - debian:12-slim >/dev/null
    say "imported debian:12-slim"
  fi
  say "base images made in $(($(date +%s) - t0)) s"
  rm -rf "$root"; trap - EXIT
fi

# 4. can a container run here?
if ! out=$(podman run --rm --network host debian:12-slim true 2>&1); then
  echo "$out" | tail -5
  case $out in
    *"user namespace"*|*newuidmap*|*"operation not permitted"*|*"Operation not permitted"*|\
    *"permission denied"*|*cgroup*|*overlay*|*"mount"*)
      skip "podman cannot run a container on this machine (above)" ;;
  esac
  echo "podman_setup: podman run failed" >&2
  exit 1
fi
say "ready ($(podman --version), runtime $(podman info --format '{{.Host.OCIRuntime.Name}}'))"
