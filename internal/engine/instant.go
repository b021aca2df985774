package engine

import "time"

// GCRA, the token bucket and the shaper keep their whole state in one
// instant: when the limiter is full (or the queue empty) again, in
// nanoseconds since the Unix epoch. It is stored as a decimal string — the
// format redis-cell uses — in a key that expires at that instant.

// The families whose state is an instant, as errors name them.
const (
	gcraState   = "GCRA state (a Unix time in nanoseconds)"
	bucketState = "token bucket state (a Unix time in nanoseconds)"
	shaperState = "shaper state (a Unix time in nanoseconds)"
)

// checkKey checks a key whose state is of the given kind (a string, or a
// sorted set for the sliding log): on a key of another type it sets
// WRONGTYPE in o and returns false; on one without an expiry, which no
// limiter writes, the error that it holds other data.
func checkKey(st *KeyState, o *Outcome, kind KeyKind, state string) bool {
	switch {
	case st.Kind != KeyEmpty && st.Kind != kind:
		o.Action = ActWrongType
		return false
	case st.Kind == kind && st.ExpireMs < 0:
		o.fail(otherData(state, "it has no expiry, and limiter keys always expire"))
		return false
	}
	return true
}

// loadInstant reads the stored instant (0 when the key is empty).
// tolerance is how far ahead of now the limiter's state can legitimately
// be. On a key of another type, or one that holds other data, it sets the
// error in o and returns false.
func loadInstant(st *KeyState, o *Outcome, state string, tolerance time.Duration) (int64, bool) {
	if !checkKey(st, o, KeyString, state) {
		return 0, false
	}
	if st.Kind == KeyEmpty {
		return 0, true
	}
	v, ok := parseInstant(st.Value)
	switch {
	case !ok:
		o.fail(otherData(state, "not a decimal integer"))
	case v < minState:
		o.fail(otherData(state, "an instant before 2015"))
	case strayInstant(st, v, int64(tolerance)):
		o.fail(otherData(state, "an instant far past the key's own expiry"))
	default:
		return v, true
	}
	return 0, false
}

// strayInstant reports an instant no limiter wrote into this key: further
// ahead of now than the state can legitimately be (which a clock that
// stepped back also leaves), yet more than a second after the key's own
// expiry, where a limiter puts the expiry at the instant itself.
func strayInstant(st *KeyState, v, tolerance int64) bool {
	if v <= st.Now || v-st.Now <= tolerance { // both positive: no overflow
		return false
	}
	return expiryNs(st.ExpireMs) < v-int64(time.Second)
}

// storeInstant asks for the new instant to be written when write is set:
// SET with an expiry at the instant, or DEL when the instant has already
// come (the limiter is full again, so the key has no work left).
func storeInstant(w *KeyWrite, st *KeyState, instant int64, write bool) {
	if !write {
		return
	}
	if instant > st.Now {
		w.setInt(instant, instant)
	} else if st.Kind != KeyEmpty {
		w.Action = WriteDel
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
