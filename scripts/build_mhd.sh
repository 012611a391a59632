#!/usr/bin/env bash
# Builds libmicrohttpd 1.0.1 into PREFIX (default /usr/local) unless pkg-config already finds
# a libmicrohttpd >= 1.0 there or on the system. Usage: scripts/build_mhd.sh [PREFIX]
#
# Why not Debian 12's own package (0.9.75): it frames HTTP/1.1 requests in ways a server
# facing the internet must not. A malformed Content-Length ("-1", "0x1b", "27, 27") gets two
# response heads, an unknown Transfer-Encoding ("gzip, chunked") waits for the request
# timeout, Transfer-Encoding with a Content-Length is accepted. 1.0 fixed these upstream.
# The source is Debian 13's (its archive's orig tarball, checksum pinned), built without
# TLS, documentation or examples, which kogpt2d does not use. About 20 s on 2 cores.
set -euo pipefail
prefix=${1:-/usr/local}
version=1.0.1
sha256=a89e09fc9b4de34dde19f4fcb4faaa1ce10299b9908db1132bbfa1de47882b94
url=http://deb.debian.org/debian/pool/main/libm/libmicrohttpd/libmicrohttpd_$version.orig.tar.gz

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
if pkg-config --atleast-version=1.0 libmicrohttpd 2>/dev/null; then
    echo "libmicrohttpd $(pkg-config --modversion libmicrohttpd): ok"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL -o "$tmp/mhd.tar.gz" "$url"
echo "$sha256  $tmp/mhd.tar.gz" | sha256sum --check --quiet # http: the checksum is the trust
tar -C "$tmp" -xzf "$tmp/mhd.tar.gz"
cd "$tmp/libmicrohttpd-$version"
./configure --prefix="$prefix" --disable-https --disable-curl --disable-doc --disable-examples \
    --disable-static --enable-silent-rules >/dev/null
make -j"$(nproc)" >/dev/null
make install >/dev/null
if [ "$(id -u)" = 0 ]; then ldconfig; fi
echo "libmicrohttpd $version: built into $prefix"
