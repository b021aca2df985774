// Command module is the ratelimit Redis module, built with
// -buildmode=c-shared into build/ratelimit.so (see build.sh).
//
// The C files are the only code that talks to the server (call.c runs a
// command, zset.c reads and writes sorted sets, load.c registers the
// commands of commands_gen.c, which go generate writes from internal/spec);
// the Go side parses the arguments, runs the
// algorithm packages and returns a decision for call.c to carry out (that
// is package internal/engine, pure Go; this package is the fence). See
// docs/design.md for why the module has its own thin binding.
package main

// commands_gen.c, protocol_gen.h and version_gen.h, from the command table,
// internal/protocol and version.go.
//go:generate go run ../cmd/gen -only module

func main() {}
