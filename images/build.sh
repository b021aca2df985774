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
#   time, under the project's name, each tagged VERSION-ARCH (version.go's
#   version; the tags images/push.sh publishes), and this machine's
#   architecture also VERSION and latest:
#   ghcr.io/seed-6b3823f5/ratelimit-redis   Debian trixie's redis-server with
#                                           the module loaded
#   ghcr.io/seed-6b3823f5/ratelimit-valkey  Debian trixie's valkey-server with
#                                           the module loaded
#   ghcr.io/seed-6b3823f5/ratelimit-module  the module and the Lua files, and
#                                           Debian's static busybox to copy
#                                           them (a Kubernetes init container)
#   ghcr.io/seed-6b3823f5/ratelimit-rls     the Envoy rate limit service, a
#                                           static binary alone (also at
#                                           /bin/ratelimit), non-root
#   module and rls for linux/amd64 and linux/arm64; redis and valkey for
#   each of those this machine runs (its own, and the other through qemu
#   once make emulation registered it), and the build says what it skipped.
# The trees the server images start from (local/base:redis-trixie-ARCH,
# local/base:valkey-trixie-ARCH) are kept once built too.
set -euo pipefail
cd "$(dirname "$0")/.."

# debootstrap, and reading the trees it makes, need root: not root, the
# script runs itself again under sudo (the images' revision label read
# first, by the checkout's owner, whom git trusts).
export REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
if [ "$(id -u)" != 0 ]; then
  exec sudo env IMAGE_REPO="${IMAGE_REPO:-}" DEBIAN_MIRROR="${DEBIAN_MIRROR:-}" FORCE="${FORCE:-}" REVISION="$REVISION" "$0" "$@"
fi

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

# Debian's archive keyring checks what comes from the mirror (on Ubuntu,
# say, it is a package to install).
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
[ -f "$keyring" ] || missing+=(debian-archive-keyring)
command -v gpgv >/dev/null || missing+=(gpgv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "images: installing ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# root SUITE PACKAGES ARCH: a minimal Debian tree for ARCH with PACKAGES
# installed, made once per suite, package list and architecture (another
# architecture than this machine's runs its install scripts through qemu:
# runs below).
root() {
  local suite=$1 pkgs=$2 arch=$3 dir=$work/$1-$3-${2//,/-}
  if [ ! -d "$dir" ]; then
    echo "images: debootstrap $suite for $arch ($pkgs)" >&2
    debootstrap --arch="$arch" --keyring="$keyring" --variant=minbase --include="$pkgs" "$suite" "$dir" "$mirror" >"$dir.log" 2>&1 \
      || { tail -20 "$dir.log" >&2; exit 1; }
    # Nothing in the image needs apt's caches or docs, but each package's
    # copyright file (its license) stays.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/man
    find "$dir"/usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
  fi
  echo "$dir"
}

# image TAG SUITE PACKAGES [ARCH]: the tree as the image TAG unless it
# exists; ARCH defaults to this machine's.
image() {
  local tag=$1 suite=$2 pkgs=$3 arch=${4:-$host}
  if have "$tag" && [ -z "${FORCE:-}" ]; then
    echo "images: $tag present" >&2
    return
  fi
  local dir
  dir=$(root "$suite" "$pkgs" "$arch")
  if [ "$arch" = "$host" ]; then
    tar -C "$dir" -c . | docker import - "$tag" >/dev/null
  else
    # docker import records this machine's architecture whatever the
    # tree's; a build that ADDs the tree's tar records the one asked for,
    # and keeps the tar's owners.
    local ctx=$work/import-$arch
    mkdir -p "$ctx"
    tar -C "$dir" -cf "$ctx/rootfs.tar" .
    printf 'FROM scratch\nADD rootfs.tar /\n' >"$ctx/Dockerfile"
    docker build -q --platform "linux/$arch" -t "$tag" "$ctx" >"$ctx.log" 2>&1 || { cat "$ctx.log" >&2; exit 1; }
    rm -rf "$ctx"
  fi
  echo "images: built $tag" >&2
}

# runs ARCH: this machine runs ARCH's programs, its own or through qemu
# registered in binfmt_misc (make emulation registers it).
runs() {
  [ "$1" = "$host" ] && return 0
  local entry=/proc/sys/fs/binfmt_misc/qemu-${qemu[$1]}
  [ -f "$entry" ] && [ "$(head -1 "$entry")" = enabled ]
}
declare -A qemu=([amd64]=x86_64 [arm64]=aarch64)

servers() {
  image local/redis:7.0 bookworm redis-server
  image local/redis:8.0 trixie redis-server,valkey-server
  image local/valkey:8.1 trixie redis-server,valkey-server
}

builder() {
  image local/build:bullseye bullseye gcc,libc6-dev,gcc-aarch64-linux-gnu,libc6-dev-arm64-cross
}

# deb SUITE ARCH PACKAGE DIR: Debian's PACKAGE for ARCH from SUITE on the
# mirror, unpacked into DIR; the suite's InRelease checked against Debian's
# archive keyring, the package index and the package against the digests it
# signs. No apt configuration of this machine is used or changed.
deb() {
  local suite=$1 arch=$2 pkg=$3 dir=$4 idx=$work/deb-$1-$2 file sum
  if [ ! -f "$idx/Packages" ]; then
    mkdir -p "$idx"
    curl -fsSL "$mirror/dists/$suite/InRelease" -o "$idx/InRelease"
    gpgv --quiet --keyring "$keyring" --output "$idx/Release" "$idx/InRelease" 2>"$idx/gpgv.log" ||
      { cat "$idx/gpgv.log" >&2; echo "images: $suite's InRelease is not signed by $keyring" >&2; exit 1; }
    sum=$(awk -v f="main/binary-$arch/Packages.xz" '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 } s && $3 == f { print $1 }' "$idx/Release")
    curl -fsSL "$mirror/dists/$suite/main/binary-$arch/Packages.xz" -o "$idx/Packages.xz"
    echo "$sum  $idx/Packages.xz" | sha256sum -c --quiet >/dev/null ||
      { echo "images: $suite's main/binary-$arch/Packages.xz does not match its InRelease" >&2; exit 1; }
    xz -dc "$idx/Packages.xz" >"$idx/Packages"
  fi
  read -r file sum < <(awk -v p="$pkg" 'BEGIN { RS = ""; FS = "\n" }
    { n = f = s = ""
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^Package: /) n = substr($i, 10)
        if ($i ~ /^Filename: /) f = substr($i, 11)
        if ($i ~ /^SHA256: /) s = substr($i, 9)
      }
      if (n == p) { print f, s; exit } }' "$idx/Packages")
  [ -n "$file" ] || { echo "images: no $pkg for $arch in $suite" >&2; exit 1; }
  curl -fsSL "$mirror/$file" -o "$idx/$pkg.deb"
  echo "$sum  $idx/$pkg.deb" | sha256sum -c --quiet >/dev/null ||
    { echo "images: $mirror/$file does not match $suite's index" >&2; exit 1; }
  dpkg-deb -x "$idx/$pkg.deb" "$dir"
}

# ratelimit: the images users run, from build/dist, under the project's
# name (repo below): the module and rls images for linux/amd64 and
# linux/arm64 (files only, no step runs in them, so no emulation is needed),
# the server images for each architecture this machine runs (Debian's
# server packages run install scripts, which need that architecture's CPU
# or qemu).
ratelimit() {
  local version revision=$REVISION dist=build/dist arch
  version=$(release/version.sh)
  local lib=$dist/ratelimit-$version.lua scripts=$dist/ratelimit-$version-scripts.tar.gz
  for f in "$lib" "$scripts" "$dist"/{ratelimit-$version-linux-{amd64,arm64}.so,rls-$version-linux-{amd64,arm64}}; do
    [ -f "$f" ] || { echo "images: $f is missing: run make dist first" >&2; exit 1; }
  done

  # The build contexts, one per Dockerfile and architecture; the project's
  # license in each image.
  local ctx=$work/context
  rm -rf "$ctx"
  for arch in amd64 arm64; do
    install -D -m 755 "$dist/ratelimit-$version-linux-$arch.so" "$ctx/server-$arch/ratelimit.so"
    install -D -m 755 images/entrypoint.sh "$ctx/server-$arch/entrypoint.sh"
    install -D -m 644 LICENSE "$ctx/server-$arch/LICENSE"
    local m=$ctx/module-$arch r=$ctx/rls-$arch
    install -D -m 755 "$dist/ratelimit-$version-linux-$arch.so" "$m/ratelimit/ratelimit.so"
    install -D -m 644 "$lib" "$m/ratelimit/ratelimit.lua"
    tar -xzf "$scripts" -C "$m/ratelimit"
    # Debian trixie's static busybox, to copy them: the binary, its
    # applets as links beside it (what busybox --install -s makes, made
    # here so that nothing runs in the image), its license.
    deb trixie "$arch" busybox-static "$work/busybox-$arch"
    install -D -m 755 "$work/busybox-$arch/usr/bin/busybox" "$m/bin/busybox"
    install -D -m 644 "$work/busybox-$arch/usr/share/doc/busybox-static/copyright" "$m/usr/share/doc/busybox-static/copyright"
    install -D -m 644 LICENSE "$m/usr/share/doc/ratelimit/LICENSE"
    mkdir -p "$m/modules"
    install -D -m 755 "$dist/rls-$version-linux-$arch" "$r/bin/rls"
    install -D -m 644 LICENSE "$r/usr/share/doc/ratelimit/LICENSE"
    ln -s rls "$r/bin/ratelimit"
  done
  # The applets, where busybox --install -s puts them (/bin, /sbin,
  # /usr/bin, /usr/sbin), listed by the busybox this machine runs (both are
  # the same Debian version, built with the same configuration).
  local applet
  for applet in $("$work/busybox-$host/usr/bin/busybox" --list-full); do
    # linuxrc: the init of an initramfs, nothing to an image.
    [ "$applet" = bin/busybox ] || [ "$applet" = linuxrc ] || for arch in amd64 arm64; do
      mkdir -p "$ctx/module-$arch/$(dirname "$applet")"
      ln -s /bin/busybox "$ctx/module-$arch/$applet"
    done
  done

  # The server images, for each architecture this machine runs: Debian's
  # server packages run install scripts, and the image's own step runs too.
  local name
  for arch in amd64 arm64; do
    for name in redis valkey; do
      if ! runs "$arch"; then
        # One an earlier build left is not this build's: push.sh would
        # publish it.
        docker rmi "$repo/ratelimit-$name:$version-$arch" >/dev/null 2>&1 || true
        skipped+=("$repo/ratelimit-$name for linux/$arch: Debian's $name-server runs install scripts, which need a linux/$arch CPU or its emulation, and this machine has neither (make emulation registers qemu-user-static where the kernel allows)")
        continue
      fi
      image "local/base:$name-trixie-$arch" trixie "$name-server" "$arch"
      build "$name" "$arch" "Debian trixie's ${name^} with the ratelimit module loaded" "$ctx/server-$arch" \
        --build-arg "BASE=local/base:$name-trixie-$arch" --build-arg "SERVER=$name-server" \
        --build-arg "RUNAS=$name" -f "$PWD/images/server.Dockerfile"
    done
  done
  for arch in amd64 arm64; do
    build module "$arch" "The ratelimit module and its Lua files, and a static busybox to copy them (an init container)" \
      "$ctx/module-$arch" -f "$PWD/images/module.Dockerfile"
    build rls "$arch" "The Envoy rate limit service on the ratelimit module, static and non-root" \
      "$ctx/rls-$arch" -f "$PWD/images/rls.Dockerfile"
  done
  # This machine's architecture is the one docker run finds under the
  # version and latest; images/push.sh joins the architectures under them
  # in the registry.
  for name in redis valkey module rls; do
    docker tag "$repo/ratelimit-$name:$version-$host" "$repo/ratelimit-$name:$version"
    docker tag "$repo/ratelimit-$name:$version-$host" "$repo/ratelimit-$name:latest"
  done
  # What each rebuild left untagged.
  docker image prune -f --filter "label=$source" >/dev/null
  local s
  for s in "${skipped[@]}"; do
    echo "images: skipped $s" >&2
  done
}

# The images' names: $repo/ratelimit-NAME, repo the Makefile's IMAGE_REPO
# (images/push.sh publishes them there, or under REGISTRY).
repo=${IMAGE_REPO:-ghcr.io/seed-6b3823f5}
source=org.opencontainers.image.source=https://github.com/seed-6b3823f5/ratelimit
host=$(dpkg --print-architecture)
case $host in
  amd64 | arm64) ;;
  *) echo "images: this machine is $host; the images are built on amd64 or arm64" >&2; exit 1 ;;
esac
skipped=()

# build NAME ARCH DESCRIPTION CONTEXT ARGS...: docker build
# $repo/ratelimit-NAME:VERSION-ARCH for linux/ARCH, with the OCI labels.
build() {
  local name=$1 arch=$2 description=$3 ctx=$4 ref=$repo/ratelimit-$1:$version-$2
  shift 4
  # The classic builder (no buildx here): its deprecation notice is noise,
  # its log is shown when a build fails. Nothing runs in a foreign
  # architecture's build, so --platform needs no emulation.
  docker build --platform "linux/$arch" --label "$source" \
    --label "org.opencontainers.image.title=ratelimit-$name" \
    --label "org.opencontainers.image.description=$description" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    -t "$ref" "$@" "$ctx" >"$work/$name-$arch.log" 2>&1 ||
    { cat "$work/$name-$arch.log" >&2; exit 1; }
  echo "images: built $ref ($(docker image inspect -f '{{.Size}}' "$ref") bytes)" >&2
}

[ $# -gt 0 ] || set -- servers builder ratelimit
for what in "$@"; do
  case $what in
    servers | builder | ratelimit) "$what" ;;
    *) echo "images: unknown set $what (servers, builder or ratelimit)" >&2; exit 2 ;;
  esac
done
