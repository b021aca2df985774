#!/usr/bin/env bash
# Builds the module: build/ratelimit.so (or $OUT), a c-shared Go library,
# for this machine (or for GOARCH, with CC its C compiler: make dist).
#   -Wl,--no-undefined  an undefined symbol fails the build, not the load
#   -Wl,-z,nodelete     dlclose() never unmaps the library: the Go runtime
#                       keeps running threads once loaded, so a failed load
#                       (which the server dlclose()s) must not unmap it
# Go writes the library 0644 and Redis refuses a module without the execute
# bit, hence the chmod. glibc only: musl cannot load a Go shared library.
set -euo pipefail
cd "$(dirname "$0")"
out=${OUT:-build/ratelimit.so}
mkdir -p "$(dirname "$out")"
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wall -Werror"
export CGO_LDFLAGS="${CGO_LDFLAGS:-} -Wl,--no-undefined -Wl,-z,nodelete"
go build -buildmode=c-shared -trimpath -o "$out" ./module
rm -f "${out%.so}.h"
chmod 755 "$out"
echo "built $out"
