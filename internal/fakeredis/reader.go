package fakeredis

import (
	"math"
	"slices"

	"github.com/seed-6b3823f5/ratelimit/conc"
	"github.com/seed-6b3823f5/ratelimit/internal/engine"
	"github.com/seed-6b3823f5/ratelimit/window"
)

// reader gives the engine a command's keys as the module's C reads them:
// scores in microseconds, instants in nanoseconds.
type reader struct {
	now    int64
	keys   []string
	vals   []*value                    // nil: no such key
	limits func(arg int) (string, int) // LIMITS's field, read when asked
}

func (r *reader) Limits(arg int) (string, int) {
	if r.limits == nil {
		return "", engine.LimitsUnread
	}
	return r.limits(arg)
}

func (r *reader) Keys() int         { return len(r.keys) }
func (r *reader) MemoryRoom() int64 { return -1 } // no maxmemory

func (r *reader) Key(i int) engine.KeyState {
	st := engine.KeyState{Now: r.now, Kind: engine.KeyEmpty, ExpireMs: -1}
	v := r.vals[i]
	if v == nil {
		return st
	}
	st.Kind, st.ExpireMs = v.kind, v.expireMs
	switch v.kind {
	case engine.KeyString:
		st.Value = v.s
	case engine.KeyZSet:
		m := sorted(v.z)
		st.ZLen = int64(len(m))
		st.Oldest, st.Newest = entry(v.z, m[0]), entry(v.z, m[len(m)-1])
	}
	return st
}

// entry is member m as C copies it.
func entry(z map[string]float64, m string) engine.ZEntry {
	return engine.ZEntry{Score: z[m], Member: m[:min(len(m), engine.MaxMember)], Length: len(m)}
}

// sorted is a sorted set's members in the server's order.
func sorted(z map[string]float64) []string {
	m := make([]string, 0, len(z))
	for k := range z {
		m = append(m, k)
	}
	slices.SortFunc(m, func(x, y string) int { return compare(z, x, y) })
	return m
}

func (r *reader) Log(i int) window.Log           { return zset{r.vals[i]} }
func (r *reader) Holders(i int) engine.HolderSet { return zset{r.vals[i]} }

// zset reads a sorted set as a sliding log or a concurrency limiter's
// leases.
type zset struct{ v *value }

func (z zset) members() []string {
	if z.v == nil || z.v.kind != engine.KeyZSet {
		return nil
	}
	return sorted(z.v.z)
}

// Count is how many entries are scored after the instant after.
func (z zset) Count(after int64) int64 {
	us := float64(engine.FloorDiv(after, 1000))
	var n int64
	for _, m := range z.members() {
		if z.v.z[m] > us {
			n++
		}
	}
	return n
}

// Nth is the k-th oldest entry scored after the instant after.
func (z zset) Nth(after, k int64) int64 {
	us := float64(engine.FloorDiv(after, 1000))
	for _, m := range z.members() {
		if z.v.z[m] > us {
			if k--; k == 0 {
				return engine.ScoreNs(z.v.z[m])
			}
		}
	}
	return engine.ScoreNs(math.Inf(-1))
}

// Newest is the newest entry, math.MinInt64 when there is none.
func (z zset) Newest() int64 {
	m := z.members()
	if len(m) == 0 {
		return math.MinInt64
	}
	return engine.ScoreNs(z.v.z[m[len(m)-1]])
}

// Holder is the caller's lease, its slots, and the latest other lease (0:
// none).
func (z zset) Holder(id string) conc.Holder {
	var h conc.Holder
	m := z.members()
	if len(m) == 0 {
		return h
	}
	own, ok := z.v.z[id]
	if !ok {
		h.Latest = engine.ScoreNs(z.v.z[m[len(m)-1]])
		return h
	}
	h.Own = engine.ScoreNs(own)
	h.Slots = engine.SlotsHeld(id, own, int64(len(m)), func(member string) (float64, bool) {
		s, ok := z.v.z[member]
		return s, ok
	})
	mine := map[string]bool{}
	for k := range h.Slots {
		mine[engine.SlotMember(id, k+1)] = true
	}
	for j := len(m) - 1; j >= 0; j-- {
		if !mine[m[j]] {
			h.Latest = engine.ScoreNs(z.v.z[m[j]])
			break
		}
	}
	return h
}
