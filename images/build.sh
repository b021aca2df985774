#!/usr/bin/env bash
# Builds the local images from Debian's packages, never from a registry.
#   images/build.sh [servers] [builder] [ratelimit]    (no argument: all three)
#
# servers: the test servers, kept once built (FORCE=1 rebuilds):
#   local/redis:7.0      Debian bookworm's redis-server
#   local/redis:8.0      Debian trixie's redis-server
#   local/valkey:8.1     Debian trixie's valkey-server
# builder: what make dist builds the module in, kept once built:
#   local/build:bullseye Debian bullseye (glibc 2.31) with gcc and the arm64
#                        cross compiler and glibc, so the module needs no
#                        newer glibc than 2.31
# ratelimit: the images users run, rebuilt from build/dist (make dist) each
#   time, tagged with the version (version.go) and latest:
#   ratelimit/redis      Debian trixie's redis-server with the module loaded
#   ratelimit/valkey     Debian trixie's valkey-server with the module loaded
#   ratelimit/module     the module and the Lua files, and Debian's static
#                        busybox to copy them (a Kubernetes init container)
#   ratelimit/rls        the Envoy rate limit service, a static binary alone
#                        (also at /bin/ratelimit), non-root
# The trees the ratelimit images start from (local/base:redis-trixie,
# local/base:valkey-trixie) are kept once built too.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Debian mirror: DEBIAN_MIRROR, else the one this machine's apt uses for
# its main archive (the first source whose suite is a release, not -security
# or -updates), from /etc/apt/sources.list.d/*.sources or sources.list.
apt_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: blank-line separated blocks of "Field: value" lines.
    awk 'BEGIN { RS = ""; FS = "\n" }
      { uri = ""; rel = 0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) { split($i, u, /[ \t]+/); uri = u[2] }
          if ($i ~ /^Suites:/) { n = split($i, v, /[ \t]+/); for (j = 2; j <= n; j++) if (v[j] !~ /-/) rel = 1 }
          if ($i ~ /^Types:/ && $i !~ /deb( |$)/) uri = ""
        }
        if (uri != "" && rel) { print uri; exit } }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # one-line: deb [options] URI suite components
    awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) while ($i !~ /\]$/) i++; if ($i ~ /^\[/ || $i ~ /\]$/) i++
      if ($(i + 1) !~ /-/) { print $i; exit } }' "$f"
  done
}
mirror=${DEBIAN_MIRROR:-$(apt_mirror | head -1)}
if [ -z "$mirror" ]; then
  echo "images: no Debian mirror in /etc/apt; set DEBIAN_MIRROR to one" >&2
  exit 1
fi
echo "images: Debian mirror $mirror" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

have() { docker image inspect "$1" >/dev/null 2>&1; }

if ! command -v debootstrap >/dev/null; then
  echo "images: installing debootstrap" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

# root SUITE PACKAGES: a minimal Debian tree with PACKAGES installed, made
# once per suite and package list.
root() {
  local suite=$1 pkgs=$2 dir=$work/$1-${2//,/-}
  if [ ! -d "$dir" ]; then
    echo "images: debootstrap $suite ($pkgs)" >&2
    debootstrap --variant=minbase --include="$pkgs" "$suite" "$dir" "$mirror" >"$dir.log" 2>&1 \
      || { tail -20 "$dir.log" >&2; exit 1; }
    # Nothing in the image needs apt's caches or docs, but each package's
    # copyright file (its license) stays.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/man
    find "$dir"/usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
  fi
  echo "$dir"
}

# image TAG SUITE PACKAGES: import the tree as TAG unless it exists.
image() {
  local tag=$1 suite=$2 pkgs=$3
  if have "$tag" && [ -z "${FORCE:-}" ]; then
    echo "images: $tag present" >&2
    return
  fi
  local dir
  dir=$(root "$suite" "$pkgs")
  tar -C "$dir" -c . | docker import - "$tag" >/dev/null
  echo "images: built $tag" >&2
}

servers() {
  image local/redis:7.0 bookworm redis-server
  image local/redis:8.0 trixie redis-server,valkey-server
  image local/valkey:8.1 trixie redis-server,valkey-server
}

builder() {
  image local/build:bullseye bullseye gcc,libc6-dev,gcc-aarch64-linux-gnu,libc6-dev-arm64-cross
}

# ratelimit: the images users run, from build/dist.
ratelimit() {
  local version dist=build/dist
  version=$(release/version.sh)
  local so=$dist/ratelimit-$version-linux-amd64.so rls=$dist/rls-$version-linux-amd64
  local lib=$dist/ratelimit-$version.lua scripts=$dist/ratelimit-$version-scripts.tar.gz
  for f in "$so" "$rls" "$lib" "$scripts"; do
    [ -f "$f" ] || { echo "images: $f is missing: run make dist first" >&2; exit 1; }
  done
  image local/base:redis-trixie trixie redis-server
  image local/base:valkey-trixie trixie valkey-server

  # Debian's static busybox, for the module image's copy.
  local bb=$work/busybox
  mkdir -p "$bb"
  (cd "$bb" && apt-get download busybox-static >/dev/null 2>&1) || {
    apt-get update -qq && (cd "$bb" && apt-get download busybox-static >/dev/null)
  }
  dpkg-deb -x "$bb"/busybox-static_*.deb "$bb/root"

  # The build contexts, one per Dockerfile; the project's license in each
  # image.
  local ctx=$work/context
  rm -rf "$ctx"
  install -D -m 755 "$so" "$ctx/server/ratelimit.so"
  install -D -m 755 images/entrypoint.sh "$ctx/server/entrypoint.sh"
  install -D -m 644 LICENSE "$ctx/server/LICENSE"
  install -D -m 755 "$so" "$ctx/module/ratelimit/ratelimit.so"
  install -D -m 644 "$lib" "$ctx/module/ratelimit/ratelimit.lua"
  tar -xzf "$scripts" -C "$ctx/module/ratelimit"
  install -D -m 755 "$bb/root/bin/busybox" "$ctx/module/bin/busybox"
  install -D -m 644 "$bb/root/usr/share/doc/busybox-static/copyright" "$ctx/module/usr/share/doc/busybox-static/copyright"
  install -D -m 644 LICENSE "$ctx/module/usr/share/doc/ratelimit/LICENSE"
  install -D -m 755 "$rls" "$ctx/rls/bin/rls"
  install -D -m 644 LICENSE "$ctx/rls/usr/share/doc/ratelimit/LICENSE"
  ln -s rls "$ctx/rls/bin/ratelimit"

  local name
  for name in redis valkey; do
    build "$name" "$ctx/server" --build-arg "BASE=local/base:$name-trixie" --build-arg "SERVER=$name-server" \
      --build-arg "RUNAS=$name" -f "$PWD/images/server.Dockerfile"
  done
  build module "$ctx/module" -f "$PWD/images/module.Dockerfile"
  build rls "$ctx/rls" -f "$PWD/images/rls.Dockerfile"
  # What each rebuild left untagged.
  docker image prune -f --filter "label=$source" >/dev/null
}

source=org.opencontainers.image.source=https://github.com/seed-6b3823f5/ratelimit

# build NAME CONTEXT ARGS...: docker build ratelimit/NAME, tagged with the
# version and latest.
build() {
  local name=$1 ctx=$2
  shift 2
  # The classic builder (no buildx here): its deprecation notice is noise,
  # its log is shown when a build fails.
  docker build --label "org.opencontainers.image.version=$version" --label "$source" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    -t "ratelimit/$name:$version" -t "ratelimit/$name:latest" "$@" "$ctx" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; exit 1; }
  echo "images: built ratelimit/$name:$version ($(docker image inspect -f '{{.Size}}' "ratelimit/$name:$version") bytes)" >&2
}

[ $# -gt 0 ] || set -- servers builder ratelimit
for what in "$@"; do
  case $what in
    servers | builder | ratelimit) "$what" ;;
    *) echo "images: unknown set $what (servers, builder or ratelimit)" >&2; exit 2 ;;
  esac
done
