#!/usr/bin/env bash
# Builds the local test images from Debian's packages, never from a registry:
#   local/redis:7.0    Debian bookworm's redis-server
#   local/redis:8.0    Debian trixie's redis-server
#   local/valkey:8.1   Debian trixie's valkey-server
# An image that already exists is kept; FORCE=1 rebuilds.
set -euo pipefail

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

have() { docker image inspect "$1" >/dev/null 2>&1; }

if ! command -v debootstrap >/dev/null; then
  echo "images: installing debootstrap" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

# root SUITE PACKAGES: a minimal Debian tree in $work/SUITE with PACKAGES installed, made once per suite.
root() {
  local suite=$1 pkgs=$2 dir=$work/$1
  if [ ! -d "$dir" ]; then
    echo "images: debootstrap $suite ($pkgs)" >&2
    debootstrap --variant=minbase --include="$pkgs" "$suite" "$dir" "$mirror" >"$work/$suite.log" 2>&1 \
      || { tail -20 "$work/$suite.log" >&2; exit 1; }
    # Nothing in the image needs apt's caches or docs.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc "$dir"/usr/share/man
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

image local/redis:7.0 bookworm redis-server
image local/redis:8.0 trixie redis-server,valkey-server
image local/valkey:8.1 trixie redis-server,valkey-server
