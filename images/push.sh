#!/usr/bin/env bash
# images/push.sh [--dry-run]: publishes the images make images built, as
# make publish does on a release (make push alone, to a registry of your
# own with REGISTRY=host/path). For each of ratelimit-redis, -valkey,
# -module and -rls:
#   1. each architecture's image under VERSION-ARCH (docker push);
#   2. VERSION and latest, each one manifest list of those architectures
#      (docker manifest), so that docker pull picks the machine's own.
# REGISTRY defaults to IMAGE_REPO (the Makefile's, ghcr.io/seed-6b3823f5),
# the images' own names; under
# another, each image is tagged there first (a registry on 127.0.0.1 or
# localhost is spoken to over plain HTTP, as Docker does). With
# REGISTRY_USER and REGISTRY_PASSWORD set, it logs in to the registry's
# host first. --dry-run prints the commands instead of running them, each
# after "+ ", and checks what it can without a registry. With IMAGES_LIST
# set to a file, it writes there every reference it pushes, one per line,
# each list followed by its platforms (make publish's images.txt).
# Refused when the module or rls image lacks one of linux/amd64 and
# linux/arm64: those two are published for both or not at all.
set -euo pipefail
cd "$(dirname "$0")/.."
own=${IMAGE_REPO:-ghcr.io/seed-6b3823f5}
list=${IMAGES_LIST:-/dev/null}
: >"$list"
registry=${REGISTRY:-$own}
version=$(release/version.sh)
dry=
case ${1:-} in
  --dry-run) dry=1 ;;
  "") ;;
  *) echo "push: unknown argument $1 (--dry-run or none)" >&2; exit 2 ;;
esac
run() {
  if [ -n "$dry" ]; then echo "+ $*"; else "$@"; fi
}
insecure=()
case $registry in 127.0.0.1:* | localhost:*) insecure=(--insecure) ;; esac

if [ -n "${REGISTRY_USER:-}" ]; then
  [ -n "${REGISTRY_PASSWORD:-}" ] || { echo "push: REGISTRY_USER without REGISTRY_PASSWORD" >&2; exit 2; }
  if [ -n "$dry" ]; then
    echo "+ docker login ${registry%%/*} -u $REGISTRY_USER --password-stdin"
  else
    printf '%s' "$REGISTRY_PASSWORD" | docker login "${registry%%/*}" -u "$REGISTRY_USER" --password-stdin >/dev/null
  fi
fi

for name in redis valkey module rls; do
  src=$own/ratelimit-$name dst=$registry/ratelimit-$name
  refs=() platforms=()
  for arch in amd64 arm64; do
    if ! docker image inspect "$src:$version-$arch" >/dev/null 2>&1; then
      case $name in
        module | rls) echo "push: $src:$version-$arch is missing: run make images" >&2; exit 1 ;;
        *) continue ;;
      esac
    fi
    built=$(docker image inspect -f '{{.Os}}/{{.Architecture}} {{index .Config.Labels "org.opencontainers.image.version"}}' "$src:$version-$arch")
    [ "$built" = "linux/$arch $version" ] ||
      { echo "push: $src:$version-$arch is $built, not linux/$arch $version: run make images" >&2; exit 1; }
    [ "$src" = "$dst" ] || run docker tag "$src:$version-$arch" "$dst:$version-$arch"
    run docker push -q "$dst:$version-$arch"
    refs+=("$dst:$version-$arch")
    platforms+=("linux/$arch")
    echo "$dst:$version-$arch" >>"$list"
  done
  [ ${#refs[@]} -gt 0 ] || { echo "push: no image of $src:$version: run make images" >&2; exit 1; }
  for tag in "$version" latest; do
    run docker manifest create "${insecure[@]}" --amend "$dst:$tag" "${refs[@]}"
    run docker manifest push "${insecure[@]}" --purge "$dst:$tag"
    (IFS=,; echo "$dst:$tag ${platforms[*]}") >>"$list"
  done
done
