package lease

// Demand: what a key's decisions here ask for, measured, sizing its grants.

import "time"

// The tier's tuning numbers, each with its reason.
const (
	// demandBuckets: a key's demand is counted per Target, each Target
	// passed halving the past; after 8 the past weighs under 1/256 and
	// the rest are skipped at once (a key idle for an hour costs 8 steps,
	// not 72,000).
	demandBuckets = 8
	// spentTargets: what a key spends while Redis answers is averaged over
	// about 16 Targets (800 ms by default), long enough to smooth one
	// burst, short enough to follow a change of load within a second; a
	// fallback spends at most at that rate (fallbackRate).
	spentTargets = 16
	// keepTargets: after a fallback, grants leave the other processes'
	// shares of the window for 3 Targets, the time each takes to find
	// Redis again (its next call, within a Target) and charge what it
	// admitted, with a Target to spare.
	keepTargets = 3
	// windowEndMargin: a fixed window's ResetAfter is rounded up to the
	// millisecond and measured from the server's receipt; 2 ms less from
	// the send puts the window's end no later than the server's.
	windowEndMargin = 2 * time.Millisecond
)

// observe counts a decision of cost at now in the demand buckets, and
// makes the key hot when a bucket sees hot decisions.
func (k *leaseKey) observe(now, target int64, cost, hot int64) {
	if now >= k.bucket+target {
		for i := 0; i < demandBuckets && now >= k.bucket+target; i++ { // each bucket passed halves the past
			k.rate = (k.rate + float64(k.asked)) / 2
			if k.down == 0 { // what it spends while Redis answers
				k.spentRate += (float64(k.spent) - k.spentRate) / spentTargets
			}
			k.asked, k.seen, k.spent = 0, 0, 0
			k.bucket += target
		}
		if now >= k.bucket+target {
			k.bucket, k.rate = now, 0
			if k.down == 0 {
				k.spentRate = 0
			}
		}
	}
	k.asked += cost
	k.seen++
	k.used = now
	if k.seen >= hot {
		k.hot = true
	}
}
