package rls

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// lines is a slog handler keeping each record's message and its
// "occurrences" attribute (0 when absent).
type lines struct {
	mu   sync.Mutex
	recs []logLine
}

type logLine struct {
	msg         string
	occurrences int64
	attrs       map[string]string
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *lines) WithGroup(string) slog.Handler            { return l }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	ln := logLine{msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "occurrences" {
			ln.occurrences = a.Value.Int64()
		}
		ln.attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, ln)
	l.mu.Unlock()
	return nil
}

// of is the lines of msg so far.
func (l *lines) of(msg string) []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(l.recs), func(ln logLine) bool { return ln.msg != msg })
}

// occurrences is the sum of the occurrences the lines of msg stand for.
func (l *lines) occurrences(msg string) int64 {
	var n int64
	for _, ln := range l.of(msg) {
		n += ln.occurrences
	}
	return n
}

// TestRepeats: the first occurrence of an error is written at once; the
// next ones within the interval are held and written as one line carrying
// their count, by the timer when nothing more comes, or with stop; another
// error is written apart; every occurrence is accounted for by exactly one
// line.
func TestRepeats(t *testing.T) {
	l := &lines{}
	r := newRepeats(slog.New(l), slog.LevelError, "refused", time.Hour)
	for v := range 5 {
		r.log("bad unit", "version", v)
	}
	r.log("bad algorithm", "version", 9)
	got := l.of("refused")
	if len(got) != 2 || got[0].occurrences != 1 || got[0].attrs["version"] != "0" || got[1].attrs["version"] != "9" {
		t.Fatalf("lines before the hour: %+v, want version 0 and version 9, once each", got)
	}
	r.stop()
	got = l.of("refused")
	if len(got) != 3 || got[2].occurrences != 4 || got[2].attrs["version"] != "4" {
		t.Fatalf("lines after stop: %+v, want a third standing for versions 1 to 4", got)
	}

	// With a short interval, the timer writes what is held though nothing
	// more comes.
	l = &lines{}
	r = newRepeats(slog.New(l), slog.LevelWarn, "refused", time.Second)
	defer r.stop()
	for v := range 3 {
		r.log("bad unit", "version", v)
	}
	waitUntil(t, "the held occurrences written", func() bool { return l.occurrences("refused") == 3 })
	if got := l.of("refused"); len(got) != 2 || got[1].occurrences != 2 || got[1].attrs["version"] != "2" {
		t.Fatalf("lines: %+v, want the first, then one standing for versions 1 and 2", got)
	}
}

// TestRepeatsBounded: however many distinct errors come, a repeats holds
// at most maxRepeatKeys, and what it held is still written.
func TestRepeatsBounded(t *testing.T) {
	l := &lines{}
	r := newRepeats(slog.New(l), slog.LevelError, "refused", time.Hour)
	const n = 10 * maxRepeatKeys
	for i := range n {
		r.log(string(rune('a'+i%26))+string(rune(i)), "i", i) // each twice: once written, once held
		r.log(string(rune('a'+i%26))+string(rune(i)), "i", i)
		if len(r.keys) > maxRepeatKeys {
			t.Fatalf("%d keys held", len(r.keys))
		}
	}
	r.stop()
	if got := l.occurrences("refused"); got != 2*n {
		t.Fatalf("lines stand for %d occurrences, want %d", got, 2*n)
	}
}
