package ratelimit

import (
	"strconv"
	"time"
)

// The IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11):
// RateLimit-Policy states each policy's quota, RateLimit where it stands,
// one list item per policy, as httplimit and rls write them:
//
//	RateLimit-Policy: "per-ip";q=10;w=60, "exports";q=4;qu="concurrent-requests"
//	RateLimit: "per-ip";r=9;t=60
//
// Integers have at most 15 digits (RFC 9651): larger ones are clamped.
// httplimit and rls write them; a front-end of another protocol (a gRPC
// interceptor, say) writes the same items with these.

// PolicyItem is one item of RateLimit-Policy: q admitted per w, w rounded
// up to whole seconds. PolicyItem("per-ip", 10, time.Minute) is
// "per-ip";q=10;w=60.
func PolicyItem(name string, q int64, w time.Duration) string {
	return strconv.Quote(name) + ";q=" + itoa(FieldInt(q)) + ";w=" + itoa(FieldInt(FieldSeconds(w)))
}

// ConcurrencyPolicyItem is a concurrency policy's item of
// RateLimit-Policy: "exports";q=4;qu="concurrent-requests".
func ConcurrencyPolicyItem(name string, limit int64) string {
	return strconv.Quote(name) + ";q=" + itoa(FieldInt(limit)) + `;qu="concurrent-requests"`
}

// StateItem is one item of RateLimit: r remaining, t rounded up to whole
// seconds (until the limit resets, or, refused, until the request would
// pass: the caller picks). StateItem("per-ip", 9, 59500*time.Millisecond)
// is "per-ip";r=9;t=60.
func StateItem(name string, r int64, t time.Duration) string {
	return strconv.Quote(name) + ";r=" + itoa(FieldInt(r)) + ";t=" + itoa(FieldInt(FieldSeconds(t)))
}

// FieldInt keeps an integer of the fields within 0 and 15 digits:
// FieldInt(-3) is 0, FieldInt(1e16) is 999999999999999.
func FieldInt(v int64) int64 { return min(max(v, 0), 999_999_999_999_999) }

// FieldSeconds rounds d up to whole seconds, as the fields and Retry-After
// state a time: FieldSeconds(59500*time.Millisecond) is 60; 0 for d ≤ 0.
func FieldSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
