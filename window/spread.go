package window

import (
	"crypto/sha1"
	"encoding/binary"
)

// MaxSpreadWindow is the longest window, in seconds, a spread may shift:
// 10^9 s (31.7 years), shorter than the time from the epoch to 2015, the
// earliest clock the limiters read, so that a shifted clock is never
// negative.
const MaxSpreadWindow = 1_000_000_000

// SpreadOffset is where key's windows of window seconds start: an offset
// in milliseconds from the epoch's alignment, 0 to window × 1000 − 1,
// derived from key alone. With it a window runs from offset + k × window
// to offset + (k+1) × window rather than from k × window, so the keys of
// one limit reset at instants spread uniformly over the window rather than
// all at once (the module's and the Lua library's SPREAD option).
//
// The offset is the first 52 bits of the key's SHA-1 (its first 13 hex
// digits), modulo the window in milliseconds: the same integer in Go, C
// and Lua (redis.sha1hex), exact in a double. "user:42" with a window of
// 60 s is offset 55114 ms, so its minutes run from hh:mm:55.114. A
// window longer than MaxSpreadWindow gives -1: no spread is defined.
//
// The limiters here take a spread window by shifting time: pass them now
// less the offset (and a stored expiry less the offset), and add the
// offset to the instants they return (a window's end, an expiry); the
// durations they return (RetryAfter, ResetAfter) stand as they are.
func SpreadOffset(key string, window int64) int64 {
	if window < 1 || window > MaxSpreadWindow {
		return -1
	}
	sum := sha1.Sum([]byte(key))
	h := binary.BigEndian.Uint64(sum[:8]) >> 12 // the first 13 hex digits
	return int64(h % uint64(window*1000))
}
