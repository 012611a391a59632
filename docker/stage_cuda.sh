#!/usr/bin/env bash
# Stages the build context of docker/Dockerfile.cuda (issue 29): the CUDA build of kogpt2 and
# the CUDA libraries it links, from the toolkit on this machine (the toolkit is in no image, and
# no image is pulled):
#   docker/stage_cuda.sh DIR [extra CMake arguments, e.g. -DCMAKE_CUDA_ARCHITECTURES=90]
#   docker build -f docker/Dockerfile.cuda -t kogpt2d:cuda DIR
# DIR is emptied, then gets:
#   opt/kogpt2/   `KG_CUDA=ON KG_TRAIN=ON docker/build.sh DIR/opt/kogpt2` (Release, in
#                 build-docker-cuda/): kogpt2d, kogpt2, kogpt2-train, the Explorer, the default
#                 model; or a copy of KG_CUDA_PREFIX, an install that same command made before
#                 (CI reuses ctest's test_deploy_build_cuda install)
#   cuda/         the CUDA libraries libkgcuda.so (the CUDA backend, in bin/ beside the
#                 programs, which open it only for a GPU) links, found with ldd in $CUDA_HOME and copied
#                 under their sonames: libcudart, libcublas, libcublasLt. Any other library
#                 from the toolkit fails the staging: the image carries these three only.
#   local/        libmicrohttpd.so.12 from /usr/local/lib (scripts/build_mhd.sh)
#   MANIFEST      the toolkit's version, and each staged file's size and sha256
# The binaries link Debian 12's libraries, which the image installs by the same names, so this
# runs on Debian 12 only; the toolkit's version must be the one the Dockerfile names (its ARG
# CUDA_VERSION: the driver requirement it sets).
# Env: CUDA_HOME (default /usr/local/cuda), KG_CUDA_PREFIX, KG_JOBS.
# Exit 0 staged, 1 an error, 2 usage.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: docker/stage_cuda.sh DIR [cmake args...]" >&2; exit 2; }
DIR=$1; shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
die() { echo "docker/stage_cuda.sh: $*" >&2; exit 1; }

# shellcheck disable=SC1091  # the running system's
. /etc/os-release
if [ "${ID:-}" != debian ] || [ "${VERSION_ID:-}" != 12 ]; then
  die "the image is Debian 12 and the binaries link its libraries: run this on Debian 12 (this is ${PRETTY_NAME:-unknown})"
fi
[ -x "$CUDA_HOME/bin/nvcc" ] || [ -n "${KG_CUDA_PREFIX:-}" ] ||
  die "no $CUDA_HOME/bin/nvcc (set CUDA_HOME to the CUDA toolkit)"
version=
if [ -r "$CUDA_HOME/version.json" ]; then  # toolkits from NVIDIA's installers
  version=$(tr -d '\n' < "$CUDA_HOME/version.json" |
    sed -n 's/.*"cuda" *: *{[^}]*"version" *: *"\([0-9.]*\)".*/\1/p')
fi
[ -n "$version" ] || version=$("$CUDA_HOME/bin/nvcc" --version 2>/dev/null |
  sed -n 's/.*, V\([0-9][0-9.]*\)$/\1/p')
[ -n "$version" ] || die "cannot tell the CUDA version of $CUDA_HOME"
want=$(sed -n 's/^ARG CUDA_VERSION=//p' "$SRC/docker/Dockerfile.cuda")
case $version in
  "$want"|"$want".*) ;;
  *) die "the toolkit is CUDA $version, docker/Dockerfile.cuda says $want: change its ARG CUDA_VERSION (or pass --build-arg CUDA_VERSION=${version%.*})" ;;
esac

case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
rm -rf "$DIR"
mkdir -p "$DIR/opt" "$DIR/cuda" "$DIR/local"
if [ -n "${KG_CUDA_PREFIX:-}" ]; then
  [ -x "$KG_CUDA_PREFIX/bin/kogpt2d" ] || die "KG_CUDA_PREFIX=$KG_CUDA_PREFIX has no bin/kogpt2d"
  cp -a "$KG_CUDA_PREFIX" "$DIR/opt/kogpt2"
  echo "stage_cuda: the install in $KG_CUDA_PREFIX"
else
  KG_CUDA=ON KG_TRAIN=ON CUDA_HOME=$CUDA_HOME "$SRC/docker/build.sh" "$DIR/opt/kogpt2" "$@"
fi

# The libraries the binaries and libkgcuda.so link: from the toolkit, only the three the image
# is for; the others come from Debian packages in the image (ldd's list is checked there again).
cuda_real=$(readlink -f "$CUDA_HOME")
libs=$(ldd "$DIR"/opt/kogpt2/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
[[ $libs == *libcublas* ]] || die "no $DIR/opt/kogpt2/bin/libkgcuda.so linking cuBLAS: not a CUDA build"
while read -r soname path; do
  case $(readlink -f "$path") in
    "$cuda_real"/*)
      case $soname in
        libcudart.so.*|libcublas.so.*|libcublasLt.so.*) cp -L "$path" "$DIR/cuda/$soname" ;;
        *) die "the binaries or libkgcuda.so link $soname from the toolkit; the image carries only cudart, cuBLAS and cuBLASLt" ;;
      esac ;;
    /usr/local/lib/libmicrohttpd.so*) cp -L "$path" "$DIR/local/$soname" ;;
  esac
done <<< "$libs"
for want in libcudart libcublas libcublasLt; do
  compgen -G "$DIR/cuda/$want.so.*" >/dev/null || die "no $want staged from $CUDA_HOME"
done
[ -e "$DIR/local/libmicrohttpd.so.12" ] || die "no /usr/local/lib/libmicrohttpd.so.12 (scripts/build_mhd.sh /usr/local)"

{
  echo "CUDA $version ($cuda_real)"
  (cd "$DIR" && find cuda local opt -type f -printf '%s\t%p\n' | sort -k2 |
    while IFS=$'\t' read -r size f; do printf '%s\t%s\t%s\n' "$(sha256sum "$f" | cut -c1-64)" "$size" "$f"; done)
} > "$DIR/MANIFEST"
echo "stage_cuda: staged in $DIR ($(du -sh "$DIR" | cut -f1)): CUDA $version: $(cd "$DIR/cuda" && echo *)"
