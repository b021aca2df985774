package lease

// The registry: each process leasing a key holds a slot at the key, so
// that each knows N, the processes sharing it.

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/seed-6b3823f5/ratelimit/client"
	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
)

// The registry of a leased key is a concurrency limit in the key's slot
// (registryKey) where each process leasing the key holds a slot under its
// id, renewed with a grant a quarter of registryEvery after it joins, then
// at most once a registryEvery, lapsing registryLease after its last: the
// holders are the processes sharing the key, N. A key no registry name
// shares a slot with (such as "a}b") has none: its N is not known, and its
// grants and fallback go by what the process spends.
const (
	registryEvery = time.Second
	registryLease = 2 * time.Second
	registryLimit = 100_000 // CONC.ACQUIRE's most
)

// registryKey is the name of key's registry: key + ":leases" when key has
// a hash tag, "{" + key + "}:leases" when it has none (the braces make key
// the tag); "" for a key no such name shares a slot with.
func registryKey(key string) string {
	r := "{" + key + "}:leases"
	if i := strings.IndexByte(key, '{'); i >= 0 && strings.IndexByte(key[i+1:], '}') > 0 {
		r = key + ":leases"
	}
	if protocol.Slot(r) != protocol.Slot(key) {
		return ""
	}
	return r
}

// registration is a key's place in its registry.
type registration struct {
	registry   string // the registry's key, in the key's slot ("": none can be named)
	registered int64  // when this process last joined it
	renewals   int64  // how many times
	procs      int64  // the processes it counted then (0: not known)
}

// register renews this process's slot in g's registry when due, and
// takes the processes it counts as N; mu guards g.
func (t *Tier) register(mu *sync.Mutex, g *registration) {
	now := t.now()
	mu.Lock()
	every := int64(registryEvery)
	if g.renewals == 1 { // the first count was taken as the others may have been joining
		every /= 4
	}
	due := g.registry != "" && now-g.registered >= every
	if due {
		g.registered = now
		g.renewals++
	}
	mu.Unlock()
	if !due {
		return
	}
	t.stats.registers.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), t.o.Timeout)
	defer cancel()
	r, err := t.c.Acquire(ctx, g.registry, client.Concurrency{Limit: registryLimit, Lease: registryLease}, t.id)
	mu.Lock()
	defer mu.Unlock()
	if err != nil { // N stays as it was; a grant 250 ms on tries again
		g.registered = now - int64(registryEvery) + int64(registryEvery)/4
		return
	}
	g.procs = max(r.Limit-r.Remaining, 1)
}
