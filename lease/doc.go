// Package lease is a local tier over a client.Client: on a key hot on this
// process, a Tier decides from units the limiter in Redis granted ahead,
// with no call and no allocation (Take: 56–94 ns, `go test -run '^$'
// -bench LeasedTake ./lease`), and asks for more
// before they run out. Each process's grants are its fair share of the
// limit's rate; a GCRA or token bucket admits at most rate × τ more than
// the exact limiter in any window (PerSecond(1000), τ 200 ms: 200 more),
// a fixed window exactly its limit. While Redis is away a hot key decides
// at its share and what it admitted is charged when Redis answers.
//
//	tier := lease.New(c, lease.Options{}) // Target 50 ms, τ 200 ms
//	defer tier.Close(ctx)                 // gives back what it holds
//	res, err := tier.Take(ctx, "rl:api:all", client.PerSecond(50000), 1)
//
// Several limits of one request are decided all or nothing (All, Decide),
// concurrency slots handed out from those the process holds (Acquire).
// Package admit uses a Tier for every group of leasable limits; see Tier
// for the contract in full.
package lease
