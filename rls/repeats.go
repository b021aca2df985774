package rls

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// logEvery is the least time between two log lines of one repeated error:
// an xDS server sending one bad version after another (937 in 10 s, each
// refused for the same reason) or a config file rewritten with the same
// error again and again makes one line per logEvery, not one per failure.
const logEvery = 10 * time.Second

// maxRepeatKeys bounds the errors a repeats holds at once.
const maxRepeatKeys = 64

// repeats writes one message, whose occurrences are told apart by a key
// (an error's text without what changes from one occurrence to the next,
// such as the version refused), at most once per every for each key: the
// first occurrence at once; the next ones within every are held and
// counted, and written as one line (the last one's attributes) once every
// has passed since the line before, at the next occurrence or, if none
// comes, by a timer. Each line carries "occurrences": how many occurrences
// it stands for.
type repeats struct {
	logger *slog.Logger
	level  slog.Level
	msg    string
	every  time.Duration

	mu   sync.Mutex
	keys map[string]*repeat
}

// repeat is one key's state.
type repeat struct {
	last  time.Time // when its last line was written
	held  int       // occurrences since, not written yet
	attrs []any     // the last held occurrence's
	timer *time.Timer
}

func newRepeats(log *slog.Logger, level slog.Level, msg string, every time.Duration) *repeats {
	return &repeats{logger: log, level: level, msg: msg, every: every, keys: map[string]*repeat{}}
}

// log is an occurrence of key, with the attributes of its line.
func (r *repeats) log(key string, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	e := r.keys[key]
	if e != nil && now.Sub(e.last) < r.every {
		e.held++
		e.attrs = attrs
		if e.timer == nil {
			e.timer = time.AfterFunc(e.last.Add(r.every).Sub(now), func() { r.flush(key, e) })
		}
		return
	}
	n := 1
	if e != nil {
		n += e.held // the timer is late: they go with this line
		e.stopTimer()
	} else {
		r.prune(now)
	}
	r.write(attrs, n)
	r.keys[key] = &repeat{last: now}
}

// flush writes what e holds, by its timer.
func (r *repeats) flush(key string, e *repeat) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys[key] != e {
		return
	}
	e.timer = nil
	if e.held > 0 {
		r.write(e.attrs, e.held)
		e.last, e.held, e.attrs = time.Now(), 0, nil
	}
}

// prune makes room for a key: keys with nothing held whose last line is
// older than every go first (a new occurrence would be written at once
// anyway); if that is not enough, every key's held occurrences are written
// and all go.
func (r *repeats) prune(now time.Time) {
	if len(r.keys) < maxRepeatKeys {
		return
	}
	for k, e := range r.keys {
		if e.held == 0 && now.Sub(e.last) >= r.every {
			e.stopTimer()
			delete(r.keys, k)
		}
	}
	if len(r.keys) < maxRepeatKeys {
		return
	}
	r.writeHeld()
	clear(r.keys)
}

// stop writes what is held and stops the timers.
func (r *repeats) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writeHeld()
	clear(r.keys)
}

func (r *repeats) writeHeld() {
	for _, e := range r.keys {
		e.stopTimer()
		if e.held > 0 {
			r.write(e.attrs, e.held)
			e.held = 0
		}
	}
}

func (r *repeats) write(attrs []any, n int) {
	r.logger.Log(context.Background(), r.level, r.msg, append(attrs[:len(attrs):len(attrs)], "occurrences", n)...)
}

func (e *repeat) stopTimer() {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}
