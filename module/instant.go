package main

// GCRA, the token bucket and the shaper keep their whole state in one
// instant: when the limiter is full (or the queue empty) again, in
// nanoseconds since the Unix epoch. It is stored as a decimal string — the
// format redis-cell uses — in a key that expires at that instant.

const (
	errNotGCRAState   = "ERR the key holds a string that is not GCRA state (a Unix time in nanoseconds)"
	errNotBucketState = "ERR the key holds a string that is not token bucket state (a Unix time in nanoseconds)"
	errNotShaperState = "ERR the key holds a string that is not shaper state (a Unix time in nanoseconds)"
)

// readString reads a key whose state is a string: on a key of another
// type it sets WRONGTYPE in o and returns false.
func readString(r reader, o *outcome, expire bool) (keyState, bool) {
	st := r.read(expire)
	if st.kind == keyZSet || st.kind == keyOther {
		o.action = actWrongType
		return st, false
	}
	return st, true
}

// loadInstant reads the key: the clock and the stored instant (0 when the
// key is empty). On a key of another type or a string that is not an
// instant it sets the error in o and returns false.
func loadInstant(r reader, o *outcome, notState string) (keyState, int64, bool) {
	st, ok := readString(r, o, false)
	if !ok || st.kind == keyEmpty {
		return st, 0, ok
	}
	v, ok := parseInstant(st.value)
	if !ok {
		o.fail(notState)
	}
	return st, v, ok
}

// storeInstant asks for the new instant to be written when write is set:
// SET with an expiry at the instant, or DEL when the instant has already
// come (the limiter is full again, so the key has no work left).
func storeInstant(o *outcome, st keyState, instant int64, write bool) {
	if !write {
		return
	}
	if instant > st.now {
		o.setInt(instant, instant)
	} else if st.kind != keyEmpty {
		o.action = actDel
	}
}

// parseInstant reads a decimal count of nanoseconds since the Unix epoch,
// digits only.
func parseInstant(s string) (int64, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	return parseInt(s)
}
