package fakeredis

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seed-6b3823f5/ratelimit/internal/protocol"
)

// Cluster is a Redis Cluster of fake primaries: server i, at address
// "fake<i+1>:6379", owns the i-th of len(Servers) equal ranges of slots
// and answers MOVED for a key of another's, CROSSSLOT for keys of several
// slots.
type Cluster struct {
	Servers []*Server
}

// NewCluster is a cluster of n primaries, each set up by setup (nil for
// none) before any client uses it.
func NewCluster(n int, setup func(*Server)) *Cluster {
	c := &Cluster{}
	for i := range n {
		s := New()
		s.Addr = fmt.Sprintf("fake%d:6379", i+1)
		s.owns = c.owner
		if setup != nil {
			setup(s)
		}
		c.Servers = append(c.Servers, s)
	}
	return c
}

// first is the first slot of server i's range.
func (c *Cluster) first(i int) int { return i * 16384 / len(c.Servers) }

// Of is the index of the server owning slot.
func (c *Cluster) Of(slot int) int { return slot * len(c.Servers) / 16384 }

func (c *Cluster) owner(slot int) string { return c.Servers[c.Of(slot)].Addr }

// KeyOn is a key of prefix whose slot is server i's (prefix, then a
// number).
func (c *Cluster) KeyOn(i int, prefix string) string {
	for k := 0; ; k++ {
		key := fmt.Sprintf("%s%d", prefix, k)
		if c.Of(protocol.Slot(key)) == i {
			return key
		}
	}
}

// Client is a cluster client of c that never dials; it is closed when t
// ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	byAddr := map[string]*Server{}
	var slots []redis.ClusterSlot
	for i, s := range c.Servers {
		byAddr[s.Addr] = s
		end := 16383
		if i+1 < len(c.Servers) {
			end = c.first(i+1) - 1
		}
		slots = append(slots, redis.ClusterSlot{Start: c.first(i), End: end, Nodes: []redis.ClusterNode{{Addr: s.Addr}}})
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots:           func(context.Context) ([]redis.ClusterSlot, error) { return slots, nil },
		DisableRoutingPolicies: true,
		ContextTimeoutEnabled:  true,
	})
	cc.OnNewNode(func(rdb *redis.Client) {
		s := byAddr[rdb.Options().Addr]
		if s == nil {
			panic("fakeredis: no server " + rdb.Options().Addr)
		}
		rdb.AddHook(s)
	})
	t.Cleanup(func() { cc.Close() })
	return cc
}
