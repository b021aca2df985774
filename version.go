// Package ratelimit is the vocabulary of the ratelimit project — a Redis
// module that runs rate-limiter arithmetic inside the server, its Lua engine
// for servers without modules, a Go client and net/http middleware over any
// go-redis v9 client, and an Envoy rate limit service — and its version.
//
// A Verdict is the five integers every command replies (limited, limit,
// remaining, retry_after, reset_after), with durations for the times. The
// Decision of each algorithm package (gcra, bucket, window, conc) and the
// client's Result embed one, so one routine turns any of them into HTTP
// headers. GCRA of burst 15 at 30 per 60 s, on its first request:
//
//	Verdict{Limited: false, Limit: 16, Remaining: 15, RetryAfter: Never, ResetAfter: 2 * time.Second}
//
// Reserve is the rule every limiter follows for the module's RESERVE n, and
// MaxSeconds the longest period, window or lease any of them takes.
//
// Go users start at package client (the commands, over the module or the
// Lua engine) and package httplimit (the middleware); the module itself is
// built from a checkout or downloaded with each release (docs/install.md).
package ratelimit

// Version is the project's version, declared here once. Everything reports
// it: the module (MODULE LIST's ver, as major×10000 + minor×100 + patch, so
// 100 for 0.1.0; the version field of INFO ratelimit), the FUNCTION library
// (FCALL_RO ratelimit_version 0 answers it, then "+" and a digest of the
// library's code), `rls -version`, and the release tags: vX.Y.Z for this
// module, prom/vX.Y.Z and rls/vX.Y.Z for the nested ones, made together by
// `make release VERSION=X.Y.Z`. The minor and patch numbers stay below 100.
const Version = "0.1.0"
