// Package engine is the module's decision, in pure Go: it parses a
// command's arguments, reads the state of its keys as C read them (a
// Reader), runs the algorithm packages (gcra, bucket, window, conc) and
// leaves in an Outcome what to reply and what to write to each key. It
// never talks to the server: package module's C does that, and its bridge
// passes the call in and the Outcome out. Built and tested without cgo.
//
// Every command runs the same way, in Execute: parse every argument (fail
// before any side effect), check each key holds this limiter's state (or
// nothing), compute, and decide the writes; nothing is written unless the
// whole command parsed and computed. Nothing here allocates per call.
package engine

// params_gen.go: each family's parsed arguments by name, from the table.
//go:generate go run ../../cmd/gen -only internal/engine
