package breaker

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	var kinds []string
	b := New(3, 50*time.Millisecond, func(e Event) { kinds = append(kinds, e.Kind.String()) })
	fail := errors.New("down")
	for range 2 {
		if !b.Allow() {
			t.Fatal("closed, refused a call")
		}
		b.Failure(fail)
	}
	b.Success() // a success resets the count
	for range 3 {
		b.Allow()
		b.Failure(fail)
	}
	if b.Allow() {
		t.Fatal("open, allowed a call")
	}
	time.Sleep(60 * time.Millisecond)
	if probe, another := b.Allow(), b.Allow(); !probe || another {
		t.Fatal("half-open: want exactly one probe")
	}
	b.Failure(fail) // the probe fails: open again
	if b.Allow() {
		t.Fatal("reopened, allowed a call")
	}
	time.Sleep(60 * time.Millisecond)
	b.Allow()
	b.Success()
	if first, second := b.Allow(), b.Allow(); !first || !second {
		t.Fatal("closed again, refused")
	}
	want := "failure failure failure failure failure breaker-open breaker-half-open failure breaker-open breaker-half-open breaker-closed"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
}
