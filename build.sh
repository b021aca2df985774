#!/usr/bin/env bash
# Builds the module: build/ratelimit.so, a c-shared Go library.
#   -Wl,--no-undefined  an undefined symbol fails the build, not the load
#   -Wl,-z,nodelete     dlclose() never unmaps the library: the Go runtime
#                       keeps running threads once loaded, so a failed load
#                       (which the server dlclose()s) must not unmap it
# Go writes the library 0644 and Redis refuses a module without the execute
# bit, hence the chmod. glibc only: musl cannot load a Go shared library.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p build
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wall -Werror"
export CGO_LDFLAGS="${CGO_LDFLAGS:-} -Wl,--no-undefined -Wl,-z,nodelete"
go build -buildmode=c-shared -trimpath -o build/ratelimit.so ./module
rm -f build/ratelimit.h
chmod 755 build/ratelimit.so
echo "built build/ratelimit.so"
