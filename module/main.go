// Command module is the ratelimit Redis module, built with
// -buildmode=c-shared into build/ratelimit.so (see build.sh).
//
// shim.c is the only code that talks to the server; the Go side parses the
// arguments, runs the algorithm packages and returns a decision for shim.c
// to carry out. See README.md for why the module has its own thin binding.
package main

func main() {}
