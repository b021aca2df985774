package engine

import (
	"errors"
	"strings"
	"time"

	"github.com/seed-6b3823f5/ratelimit"
	"github.com/seed-6b3823f5/ratelimit/bucket"
	"github.com/seed-6b3823f5/ratelimit/gcra"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// GCRA, the token bucket and the shaper keep their whole state in one
// instant: when the limiter is full (or the queue empty) again, in
// nanoseconds since the Unix epoch. It is stored as a decimal string — the
// format redis-cell uses — in a key that expires at that instant.

// The families whose state is an instant, as errors name them.
var (
	gcraState   = spec.Families[spec.GCRA].State
	bucketState = spec.Families[spec.TB].State
	shaperState = spec.Families[spec.LB].State
)

// checkKey checks a key whose state is of the given kind (a string, or a
// sorted set for the sliding log): on a key of another type it returns
// WRONGTYPE; on one without an expiry, which no limiter writes, the error
// that it holds other data.
func checkKey(st *KeyState, kind KeyKind, state string) error {
	switch {
	case st.Kind != KeyEmpty && st.Kind != kind:
		return errWrongType
	case st.Kind == kind && st.ExpireMs < 0:
		return fail(otherData(state, "it has no expiry, and limiter keys always expire"))
	}
	return nil
}

// owedMark ends the stored instant of a limiter in debt (DEBT took it
// past its tolerance): "<instant>:debt". Read back, it is not clamped as a
// clock that stepped back.
const owedMark = ":debt"

// loadInstant reads the stored instant (0 when the key is empty), and
// whether it is owed (marked, where debt: a family that takes DEBT).
// tolerance is how far ahead of now the limiter's state can legitimately
// be. On a key of another type, or one that holds other data, it returns
// the error.
func loadInstant(st *KeyState, state string, tolerance time.Duration, debt bool) (int64, bool, error) {
	if err := checkKey(st, KeyString, state); err != nil {
		return 0, false, err
	}
	if st.Kind == KeyEmpty {
		return 0, false, nil
	}
	s, owed := strings.CutSuffix(st.Value, owedMark)
	v, ok := parseInstant(s)
	switch {
	case !ok || owed && !debt:
		return 0, false, fail(otherData(state, "not a decimal integer"))
	case v < minState:
		return 0, false, fail(otherData(state, "an instant before 2015"))
	case strayInstant(st, v, int64(tolerance)):
		return 0, false, fail(otherData(state, "an instant far past the key's own expiry"))
	}
	return v, owed, nil
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
// SET with an expiry at the instant (marked when owed), or DEL when the
// instant has already come (the limiter is full again, so the key has no
// work left).
func storeInstant(w *KeyWrite, st *KeyState, instant int64, write, owed bool) {
	if !write {
		return
	}
	if instant > st.Now {
		w.setInt(instant, instant)
		if owed {
			w.ValueLen += copy(w.Value[w.ValueLen:], owedMark)
		}
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

// runInstant runs the three families whose state is one instant, the
// schedule they share (GCRA, the token bucket, the shaper): build the
// limit, read the instant (clamped to the tolerance), decide, reply, and
// store the instant with an expiry at it. The shaper's field 5 is the
// delay before the request proceeds (0: go now, and 0 for a refused
// request, which does not go at all).
func runInstant(l *limit, st *KeyState, ms bool, rep *[5]int64, w *KeyWrite) error {
	var (
		g     gcra.Limiter
		b     bucket.TokenBucket
		q     bucket.Shaper
		tol   time.Duration
		state string
		err   error
	)
	switch l.family {
	case famGCRA:
		p := l.gcra()
		g, err = gcra.New(p.maxBurst, p.count, p.period)
		tol, state = g.Tolerance(), gcraState
	case famTB:
		p := l.tb()
		b, err = bucket.NewTokenBucket(p.capacity, p.refillTokens, p.refillPeriod)
		tol, state = b.Tolerance(), bucketState
	default:
		p := l.lb()
		q, err = bucket.NewShaper(p.capacity, p.leakCount, p.leakPeriod)
		tol, state = q.Tolerance(), shaperState
	}
	if err != nil {
		return failErr(err)
	}
	at, owed, err := loadInstant(st, state, tol, families[l.family].syntax.debt)
	if err != nil {
		return err
	}
	var v ratelimit.Verdict
	var next int64
	var write bool
	switch l.family {
	case famGCRA:
		var d gcra.Decision
		if q := l.gcra().quantity; l.debt {
			d, err = g.Charge(at, st.Now, q, owed)
		} else {
			d, err = g.ThrottleOwed(at, st.Now, q, l.reserve, owed)
		}
		v, next, write, owed = d.Verdict, d.TAT, d.Write, d.Owed
	case famTB:
		var d bucket.Decision
		if t := l.tb().tokens; l.debt {
			d, err = b.Charge(at, st.Now, t, owed)
		} else {
			d, err = b.TakeOwed(at, st.Now, t, l.reserve, owed)
		}
		v, next, write, owed = d.Verdict, d.State, d.Write, d.Owed
	default:
		var d bucket.Decision
		d, err = q.Enqueue(at, st.Now, l.lb().quantity)
		v, next, write = d.Verdict, d.State, d.Write
		v.ResetAfter = d.Delay // field 5
	}
	if err != nil {
		return chargeErr(err, l)
	}
	setReply(rep, v.Limited, v.Limit, v.Remaining, v.RetryAfter, v.ResetAfter, ms)
	storeInstant(w, st, next, write, owed)
	return nil
}

// chargeErr replies an algorithm package's error: DEBT's own text for a
// charge past what the state holds.
func chargeErr(err error, l *limit) error {
	if errors.Is(err, ratelimit.ErrDebt) {
		return fail(spec.Fill(spec.TDebtRange, *l.cost()))
	}
	return failErr(err)
}
