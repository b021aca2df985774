// Package rls is an Envoy rate limit service on the ratelimit module:
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit answered
// with envoyproxy/ratelimit's config files and response fields, so that
// its container can be swapped for cmd/rls, and with every algorithm of
// the module where a config asks for one.
//
// A config is every *.yaml or *.yml file in a directory, in the peer's
// format, plus one key inside rate_limit:
//
//	domain: apis
//	descriptors:
//	  - key: remote_address
//	    rate_limit: {unit: second, requests_per_unit: 10}   # fixed windows, as the peer counts
//	  - key: path
//	    value: /login*
//	    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra}
//
// The algorithm is fixed_window (the default: windows ending on multiples
// of the unit since the epoch, the peer's), sliding_window, sliding_log,
// gcra or token_bucket; each admits requests_per_unit per unit. A
// descriptor with is_negative_hits gives its hits back (Envoy's refund).
//
// Holds, algorithm: concurrency, keep limit requests in flight at once,
// each named by the value of the request's entry marked holder: true (a
// request id) and held until Envoy's stream-done call (is_negative_hits)
// releases it, or for hold_ttl when none comes:
//
//	descriptors:
//	  - key: user
//	    descriptors:
//	      - key: request_id
//	        holder: true
//	        rate_limit: {algorithm: concurrency, limit: 3, hold_ttl: 2m}
//
// Where it differs from envoyproxy/ratelimit, on purpose:
//
//   - The descriptors of one request are decided all or nothing: when the
//     answer is OVER_LIMIT no descriptor's count changed, and a refused hit
//     is never counted (the peer counts every descriptor of every request,
//     so a refused burst keeps a client locked out). Up to 16 keys of one
//     request in one cluster slot (every key, on a single node) are
//     decided by one RL.ALL; more, by calls of 16 of those that can give
//     back first (GCRA, token bucket), refunded when a later one refuses,
//     and the windows last in one call, or, past 16 windows, in one
//     optimistic transaction (WATCH, RL.PEEK, MULTI, RL.ALL, EXEC): any
//     number of limits of one slot is all or nothing. Across slots, a step
//     per slot likewise; a window's count, taken last, cannot be given
//     back.
//   - A refusal cache (Options.RefusalCache) answers a key that Redis
//     refused until its retry_after, exactly: a request of at least that
//     cost would be refused by Redis too.
//   - Memory is bounded whatever the traffic: metric series of keys made of
//     requests' own values (Options.MetricKeys), the refusal cache in
//     entries and bytes (Options.RefusalCacheBytes), and gRPC streams per
//     connection and in all (Streams).
//   - duration_until_reset is, when refused, the time until the same
//     request would be admitted; when admitted, until the limit is full
//     again (for a fixed window, both are the window's end, as the peer's).
//
// Quotas serves Envoy's rate limit quota service (RLQS, the
// rate_limit_quota filter) on a Service's config and Redis: each bucket's
// limit is shared out over the Envoys reporting it as token buckets whose
// rates add up to the limit's, fair by demand, and what they admit is
// charged to the limit in Redis.
//
// A Service is safe for concurrent use; Watch reloads its config when the
// directory changes, keeping the running config when a new one does not
// load. WatchXDS takes it from an xDS server instead (RateLimitConfig
// resources, as Envoy Gateway serves them), refusing an update that does
// not load.
package rls
