package main

import "testing"

// The engine's numbering of actions, writes and key kinds, its sizes and
// the table's rows are the C headers': C passes the numbers, Go reads them.
func TestNumberingMatchesShim(t *testing.T) {
	if bad := numbering(); len(bad) > 0 {
		t.Fatalf("Go and shim.h disagree on %v", bad)
	}
}
