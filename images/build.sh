#!/usr/bin/env bash
# Builds the local test images from Debian's packages, never from a registry:
#   local/redis:7.0    Debian bookworm's redis-server
#   local/redis:8.0    Debian trixie's redis-server
#   local/valkey:8.1   Debian trixie's valkey-server
# An image that already exists is kept; FORCE=1 rebuilds.
set -euo pipefail

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
