#!/usr/bin/env bash
# make dist: the files a release attaches, in build/dist/ (V: version.go's):
#   ratelimit-V-linux-amd64.so   the module for x86-64 and AArch64 Linux with
#   ratelimit-V-linux-arm64.so   glibc 2.31 or newer: built in Debian
#                                bullseye (local/build:bullseye, made by
#                                images/build.sh builder), whose glibc is 2.31
#   rls-V-linux-amd64            the Envoy rate limit service, static (no
#   rls-V-linux-arm64            libc at all)
#   ratelimit-V.lua              the FUNCTION library (lua/ratelimit.lua)
#   ratelimit-V-scripts.tar.gz   scripts/<command>.lua: every command's EVAL script
#   ratelimit-V.spdx.json        the SBOM: each file above, and the Go modules
#                                linked into each binary with their licenses
#                                (SPDX 2.3, release/sbom.go)
#   SHA256SUMS                   sha256sum -c SHA256SUMS checks them all
# The module is built with this machine's Go, module cache and build cache,
# mounted into the container, which has no network.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(release/version.sh)
[ -n "$version" ] || { echo "dist: no version in version.go" >&2; exit 1; }
out=build/dist
rm -rf "$out" && mkdir -p "$out"
images/build.sh builder
go mod download

goroot=$(go env GOROOT) modcache=$(go env GOMODCACHE) cache=$(go env GOCACHE)
mkdir -p "$cache"
echo "dist: the module for linux-amd64 and linux-arm64, in local/build:bullseye" >&2
docker run --rm --network none --user "$(id -u):$(id -g)" \
  -v "$goroot:/usr/local/go:ro" -v "$modcache:/go/mod" -v "$cache:/go/cache" -v "$PWD:/src" -w /src \
  -e HOME=/tmp -e PATH=/usr/local/go/bin:/usr/bin:/bin -e GOMODCACHE=/go/mod -e GOCACHE=/go/cache \
  -e GOFLAGS="-buildvcs=false -mod=readonly" -e GOPROXY=off -e GOTOOLCHAIN=local \
  local/build:bullseye sh -ec "
    OUT=$out/ratelimit-$version-linux-amd64.so ./build.sh
    GOARCH=arm64 CC=aarch64-linux-gnu-gcc OUT=$out/ratelimit-$version-linux-arm64.so ./build.sh
    for a in amd64:objdump arm64:aarch64-linux-gnu-objdump; do
      echo \"dist: ratelimit-$version-linux-\${a%%:*}.so needs glibc \$(\${a#*:} -T $out/ratelimit-$version-linux-\${a%%:*}.so |
        grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)\" >&2
    done"

for arch in amd64 arm64; do
  (cd rls && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w' \
    -o "../$out/rls-$version-linux-$arch" ./cmd/rls)
done

cp lua/ratelimit.lua "$out/ratelimit-$version.lua"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go run ./cmd/gen -scripts "$tmp/scripts" >/dev/null
# Reproducible: names sorted, no owner, the time of the last commit.
when=$(git log -1 --format=%ct 2>/dev/null || echo 0)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$when" -C "$tmp" -cf - scripts |
  gzip -n -9 >"$out/ratelimit-$version-scripts.tar.gz"

(cd release && go run . sbom -dist "../$out" -version "$version" -readme ../README.md \
  -created "$(date -u -d "@$when" +%Y-%m-%dT%H:%M:%SZ)" -out "../$out/ratelimit-$version.spdx.json")
(cd "$out" && sha256sum -- * >SHA256SUMS)
ls -l "$out" | awk 'NR > 1 { printf "dist: %-36s %10d bytes\n", $9, $5 }' >&2
