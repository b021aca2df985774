package engine

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// holdKeys are a limiter's key and its hold's, on a virtual clock.
type holdKeys struct {
	keys fakeKeys
	t    *testing.T
}

func newHold(t *testing.T) *holdKeys {
	return &holdKeys{keys: fakeKeys{{st: KeyState{Now: t0}}, {st: KeyState{Now: t0}}}, t: t}
}

// call runs RL.HOLD (ttl > 0) or RL.SETTLE on the two keys and stores
// what it writes, as the server would.
func (h *holdKeys) call(settle bool, ttl int, limiter ...string) Outcome {
	args := []string{"rl.hold", "k", "k:hold"}
	op := spec.OpRLHold
	if settle {
		args[0], op = "rl.settle", spec.OpRLSettle
	} else {
		args = append(args, strconv.Itoa(ttl))
	}
	var o Outcome
	Execute(op, append(args, limiter...), h.keys, &o)
	if o.Action != ActReply {
		return o
	}
	for i, k := range h.keys {
		switch w := o.Writes[i]; w.Action {
		case WriteSet:
			k.st.Kind, k.st.Value, k.st.ExpireMs = KeyString, string(w.Value[:w.ValueLen]), w.ExpireMs
		case WriteDel:
			k.st = KeyState{Now: k.st.Now}
		case WriteNone:
		default:
			h.t.Fatalf("write %d to key %d", w.Action, i)
		}
	}
	return o
}

func (h *holdKeys) advance(d time.Duration) {
	for _, k := range h.keys {
		k.st.Now += int64(d)
	}
}

func reply(o Outcome) []int64 { return o.Reply[:o.ReplyLen] }

// A hold takes its estimate as the family's command takes a cost, and
// settling charges what it missed past the limit (as DEBT) or gives back
// what it did not use; the hold lives ttl seconds and adds up.
func TestHoldAndSettle(t *testing.T) {
	h := newHold(t)
	gcra := func(cost string) []string { return []string{"GCRA", "9", "10", "1", cost, "MS"} } // 10 at once, 10 a second
	o := h.call(false, 60, gcra("4")...)
	if got := reply(o); len(got) != 5 || got[0] != 0 || got[2] != 6 {
		t.Fatalf("hold of 4: %v", got)
	}
	if h.keys[1].st.Value != "4" || h.keys[1].st.ExpireMs != (t0+60*int64(time.Second))/1e6 {
		t.Fatalf("the hold holds %q expiring %d", h.keys[1].st.Value, h.keys[1].st.ExpireMs)
	}
	// A second hold under the same key adds to it; one refused adds nothing.
	h.call(false, 60, gcra("2")...)
	if v := h.keys[1].st.Value; v != "6" {
		t.Fatalf("two holds of 4 and 2 hold %q", v)
	}
	if got := reply(h.call(false, 60, gcra("5")...)); got[0] != 1 || h.keys[1].st.Value != "6" {
		t.Fatalf("a hold of 5 with 4 left: %v, the hold %q", got, h.keys[1].st.Value)
	}
	// Settled at 12: 6 more, past what remains (4), so in debt: taken,
	// and answered as a charge over the limit is (DEBT).
	o = h.call(true, 0, gcra("12")...)
	if got := reply(o); len(got) != 6 || got[0] != 1 || got[2] != 0 || got[5] != 6 || h.keys[1].st.Kind != KeyEmpty ||
		!strings.HasSuffix(h.keys[0].st.Value, ":debt") {
		t.Fatalf("settled at 12: %v, the hold %+v, the state %q", got, h.keys[1].st, h.keys[0].st.Value)
	}
	peek := func() int64 {
		var o Outcome
		Execute(spec.OpGCRAPeek, []string{"gcra.peek", "k", "9", "10", "1", "0", "MS"}, h.keys[0], &o)
		return o.Reply[3] // retry_after of a check of cost 0
	}
	if r := peek(); r != 200 { // 12 taken at once of 10: 200 ms owed
		t.Fatalf("after the debt, a check waits %d ms", r)
	}
	// Settling again finds no hold: nothing changes, -1.
	before := h.keys[0].st.Value
	if got := reply(h.call(true, 0, gcra("12")...)); got[5] != -1 || h.keys[0].st.Value != before {
		t.Fatalf("a second settle: %v, state %q then %q", got, before, h.keys[0].st.Value)
	}

	// Settled below the estimate: the rest comes back, exactly.
	h.advance(2 * time.Second) // full again
	h.call(false, 5, gcra("8")...)
	o = h.call(true, 0, gcra("3")...)
	if got := reply(o); got[2] != 7 || got[5] != 8 {
		t.Fatalf("8 held, 3 spent: %v", got)
	}

	// A hold that lapsed: its estimate stands.
	h.advance(2 * time.Second)
	h.call(false, 5, gcra("8")...)
	h.keys[1].st = KeyState{Now: h.keys[1].st.Now} // lapsed: the server expired it
	if got := reply(h.call(true, 0, gcra("1")...)); got[5] != -1 || got[2] != 2 {
		t.Fatalf("settling a lapsed hold: %v", got)
	}
}

// A window settles into its current window: what a hold took beyond the
// actual cost comes back while the window lasts.
func TestSettleWindow(t *testing.T) {
	h := newHold(t)
	fw := func(cost string) []string { return []string{"FW", "10", "60", cost} }
	h.call(false, 30, fw("7")...)
	o := h.call(true, 0, fw("2")...)
	if got := reply(o); got[2] != 8 || got[5] != 7 || h.keys[0].st.Value != "2" {
		t.Fatalf("7 held, 2 spent: %v, count %q", got, h.keys[0].st.Value)
	}
	h.call(false, 30, fw("8")...)
	if got := reply(h.call(true, 0, fw("12")...)); got[0] != 1 || got[2] != 0 || h.keys[0].st.Value != "14" {
		t.Fatalf("8 held, 12 spent: %v, count %q", got, h.keys[0].st.Value)
	}
}

// Bad input is refused by name, and changes nothing.
func TestHoldErrors(t *testing.T) {
	max := strconv.FormatInt(spec.MaxLimit, 10)
	for _, c := range []struct {
		settle bool
		args   []string
		hold   KeyState
		want   string
	}{
		{false, []string{"0", "GCRA", "9", "10", "1", "1"}, KeyState{}, "ERR ttl must be whole seconds from 1 to 31536000"},
		{false, []string{"31536001", "GCRA", "9", "10", "1", "1"}, KeyState{}, "ERR ttl must be whole seconds"},
		{false, []string{"5", "GCRA", "9", "10", "1", "-1"}, KeyState{}, "ERR estimate must be an integer from 0 to " + max},
		{true, []string{"GCRA", "9", "10", "1", "9007199254740992"}, KeyState{}, "ERR actual must be an integer from 0 to " + max},
		{false, []string{"5", "LB", "9", "10", "1", "1"}, KeyState{}, "ERR limiter 1: LB is a shaper"},
		{false, []string{"5", "MS"}, KeyState{}, `ERR unknown limiter "MS"`},
		{false, []string{"5", "GCRA", "9", "10"}, KeyState{}, "ERR limiter 1 (GCRA) takes 4 arguments"},
		{false, []string{"5", "GCRA", "9", "10", "1", "1", "EACH"}, KeyState{}, `ERR unknown option "EACH": the options are MS`},
		{false, []string{"5", "GCRA", "9", "10", "1", "1", "DEBT"}, KeyState{}, `ERR unknown option "DEBT"`},
		{true, []string{"GCRA", "9", "10", "1", "1"}, KeyState{Kind: KeyString, Value: "x"}, `ERR the hold key "k:hold" holds other data, not a hold`},
		{true, []string{"GCRA", "9", "10", "1", "1"}, KeyState{Kind: KeyString, Value: "-3"}, `ERR the hold key "k:hold" holds other data`},
		{false, []string{"5", "GCRA", "9", "10", "1", "2"}, KeyState{Kind: KeyString, Value: max}, `ERR the hold key "k:hold" holds ` + max + ": 2 more would pass"},
		{false, []string{"5", "GCRA", "9", "10", "1", "1"}, KeyState{Kind: KeyZSet}, "WRONGTYPE"},
	} {
		h := newHold(t)
		c.hold.Now = t0
		h.keys[1].st = c.hold
		op := spec.OpRLHold
		if c.settle {
			op = spec.OpRLSettle
		}
		var o Outcome
		Execute(op, append([]string{"rl.hold", "k", "k:hold"}, c.args...), h.keys, &o)
		got := o.Err
		if o.Action == ActWrongType {
			got = "WRONGTYPE"
		}
		if o.Action == ActReply || !strings.HasPrefix(got, c.want) {
			t.Errorf("%v: %q (%d), want %q", c.args, got, o.Action, c.want)
		}
		if h.keys[0].st.Kind != KeyEmpty || h.keys[1].st != c.hold {
			t.Errorf("%v changed the keys: %+v, %+v", c.args, h.keys[0].st, h.keys[1].st)
		}
	}
	var o Outcome
	Execute(spec.OpRLHold, []string{"rl.hold", "k", "k", "5", "GCRA", "9", "10", "1", "1"}, newHold(t).keys, &o)
	if !strings.HasPrefix(o.Err, `ERR key "k" is named twice`) {
		t.Errorf("one key as both: %q", o.Err)
	}
}
