#!/usr/bin/env bash
# make release VERSION=X.Y.Z: tags vX.Y.Z, prom/vX.Y.Z and rls/vX.Y.Z on one
# commit, locally; pushes nothing.
#
# Refused unless the work tree is clean, version.go declares X.Y.Z,
# CHANGELOG.md has its "## [X.Y.Z]" section and none of the tags exists.
# Between releases prom/ and rls/ build against this checkout (replace
# ../); a user installing them from a tag must get the library from its own
# tag instead. So the script makes two commits:
#   1. "Release vX.Y.Z": prom/go.mod and rls/go.mod require the library at
#      vX.Y.Z, and rls/go.mod prom at vX.Y.Z, with no replace, and their
#      go.sum hold the hashes (computed from module proxies on disk holding
#      the library, then prom, as they are tagged, which is what the public
#      proxy will serve); the three tags point here;
#   2. back to development: the replace directives again.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=github.com/seed-6b3823f5/ratelimit
fail() { echo "release: $*" >&2; exit 1; }

version=${1:-}
version=${version#v}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "VERSION=$version: give the version as X.Y.Z (make release VERSION=0.1.0)"
[ -z "$(git status --porcelain)" ] || fail "the work tree is not clean (git status): commit or stash first"
declared=$(release/version.sh)
[ "$declared" = "$version" ] ||
  fail "version.go declares $declared, not $version: set it, run go generate ./..., add the CHANGELOG.md section and commit"
grep -q "^## \[$version\]" CHANGELOG.md || fail "CHANGELOG.md has no \"## [$version]\" section"
tags=("v$version" "prom/v$version" "rls/v$version")
for t in "${tags[@]}"; do
  ! git rev-parse -q --verify "refs/tags/$t" >/dev/null || fail "tag $t exists already"
done

proxy=$(mktemp -d)
pinned="prom/go.mod prom/go.sum rls/go.mod rls/go.sum"
step=pin
# A failure leaves what it was doing undone: the pins before the release
# commit, the replace directives after it (the tags stay: say so).
cleanup() {
  local code=$?
  chmod -R u+w "$proxy" "$proxy.prom" "$proxy.modcache" 2>/dev/null
  rm -rf "$proxy" "$proxy.prom" "$proxy.modcache"
  if [ "$code" != 0 ] && [ "$step" = pin ] && git log -1 --format=%s | grep -q "^Release v$version:"; then
    git reset -q --hard HEAD~1 # the release commit, made before rls's pin of prom failed
  fi
  if [ "$code" != 0 ] && [ "$step" != done ]; then
    git checkout -q -- $pinned
    [ "$step" = pin ] || echo "release: the tags are made; going back to development failed: add the replace directives by hand" >&2
  fi
}
trap cleanup EXIT
# The pins are checked in a module cache of their own, filled from the
# usual one's downloads (no network for what is there): the usual one may
# hold this version from an earlier attempt at releasing it, of other code,
# and Go takes a version in the cache, and what it built from it, to be
# that version for good.
shared=$(go env GOMODCACHE)
(cd release && go run . proxy -repo .. -version "v$version" -out "$proxy" -rev HEAD -modules root)
for m in prom rls; do
  (
    cd "$m"
    go mod edit -dropreplace="$lib" -require="$lib@v$version"
    export GOMODCACHE="$proxy.modcache"
    # The library from the proxy on disk (not yet in the checksum database),
    # everything else as usual.
    GOPROXY="file://$proxy,file://$shared/cache/download,$(go env GOPROXY)" GONOSUMDB="$lib" GOFLAGS=-mod=mod GOWORK=off go mod tidy
    GOPROXY="file://$proxy,file://$shared/cache/download,$(go env GOPROXY)" GONOSUMDB="$lib" GOWORK=off go build ./...
  )
done
git add $pinned
git commit -q -m "Release v$version: prom and rls require the library at v$version"
# rls requires prom too: prom as that commit holds it (its go.mod pinned),
# from a proxy of it; the commit then takes rls's pin (prom's files, and so
# its hashes, stay as they are).
(cd release && go run . proxy -repo .. -version "v$version" -out "$proxy.prom" -rev HEAD -modules prom)
(
  cd rls
  go mod edit -dropreplace="$lib/prom" -require="$lib/prom@v$version"
  export GOMODCACHE="$proxy.modcache"
  GOPROXY="file://$proxy,file://$proxy.prom,file://$shared/cache/download,$(go env GOPROXY)" GONOSUMDB="$lib" GOFLAGS=-mod=mod GOWORK=off go mod tidy
  GOPROXY="file://$proxy,file://$proxy.prom,file://$shared/cache/download,$(go env GOPROXY)" GONOSUMDB="$lib" GOWORK=off go build ./...
)
git add rls/go.mod rls/go.sum
git commit -q --amend -m "Release v$version: prom and rls require the library, and rls prom, at v$version"
for t in "${tags[@]}"; do
  git tag -a "$t" -m "ratelimit $t"
done
released=$(git rev-parse --short HEAD)
step=develop

(cd prom && go mod edit -replace="$lib=../" && GOFLAGS=-mod=mod GOWORK=off go mod tidy)
(cd rls && go mod edit -replace="$lib=../" && go mod edit -replace="$lib/prom=../prom" && GOFLAGS=-mod=mod GOWORK=off go mod tidy)
git add $pinned
git commit -q -m "Back to development after v$version: prom and rls build against this checkout (replace ../)"

step=done
echo "release: tagged ${tags[*]} at $released; nothing was pushed. To publish (the release workflow"
echo "builds and publishes v$version when its tag arrives; make release-dry shows what it publishes):"
echo "  git push origin HEAD ${tags[*]}"
