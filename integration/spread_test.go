package integration

import (
	"fmt"
	"testing"

	"github.com/seed-6b3823f5/ratelimit/window"
)

// TestSpreadReplicates: FW.HIT, SW.HIT and RL.ALL with SPREAD on 40 keys of
// a real server: every fixed window's key expires at its own offset into
// the hour (window.SpreadOffset, as the module computed it; an hour, so
// that no window ends while the test runs), the offsets differ from key to
// key, and a replica without the module holds exactly
// the primary's keys, values and expiries.
func TestSpreadReplicates(t *testing.T) {
	eachFlavor(t, func(t *testing.T, f flavor) {
		p := startFor(t, f, opts{module: true})
		r := startReplica(t, p, false)
		prefix := "rl:{spread}:"
		offsets := map[int64]bool{}
		for i := range 40 {
			fw, sw := fmt.Sprintf("%sfw%d", prefix, i), fmt.Sprintf("%ssw%d", prefix, i)
			mustCall(t, p.rdb, "FW.HIT", fw, 5, 3600, 1, "SPREAD")
			mustCall(t, p.rdb, "SW.HIT", sw, 5, 10, 2, "SPREAD", "MS")
			mustCall(t, p.rdb, "RL.ALL", 2, fw, sw, "FW", 5, 3600, 1, "SPREAD", "SW", 5, 10, 1, "SPREAD")
			at, err := p.rdb.PExpireTime(ctx, fw).Result()
			if err != nil {
				t.Fatal(err)
			}
			off := window.SpreadOffset(fw, 3600)
			if got := at.Milliseconds() % 3600000; got != off {
				t.Fatalf("%s expires %d ms into an hour, want its offset %d", fw, got, off)
			}
			if n, err := p.rdb.Get(ctx, fw).Int64(); err != nil || n != 2 {
				t.Fatalf("%s counts %d (%v), want 2", fw, n, err)
			}
			offsets[off] = true
		}
		if len(offsets) < 39 {
			t.Fatalf("40 keys share %d offsets", len(offsets))
		}
		waitReplicas(t, p, 1)
		want := snapAll(t, p.rdb, prefix+"*")
		if len(want) != 80 {
			t.Fatalf("the primary holds %d keys, want 80", len(want))
		}
		if got := snapAll(t, r.rdb, prefix+"*"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("replica differs:\nprimary %v\nreplica %v", want, got)
		}
	})
}
