package main

import "testing"

// The engine's numbering of operations, actions, writes and key kinds, and
// its sizes, are shim.h's: C passes the numbers, Go reads them.
func TestNumberingMatchesShim(t *testing.T) {
	if bad := numbering(); len(bad) > 0 {
		t.Fatalf("Go and shim.h disagree on %v", bad)
	}
}
