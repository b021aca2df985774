// Package checked is int64 arithmetic that reports overflow instead of
// wrapping. The limiter packages compute in nanoseconds since the Unix
// epoch, where a wrapped value would silently admit or refuse everything.
package checked

import (
	"math"
	"math/bits"
)

// Add returns a+b, and false if it overflows.
func Add(a, b int64) (int64, bool) {
	c := a + b
	return c, (c > a) == (b > 0)
}

// Sub returns a-b, and false if it overflows.
func Sub(a, b int64) (int64, bool) {
	c := a - b
	return c, (c < a) == (b > 0)
}

// Mul returns a*b, and false if it overflows.
func Mul(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	if (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	c := a * b
	return c, c/b == a
}

// SatAdd returns a+b for b ≥ 0, saturating at math.MaxInt64.
func SatAdd(a, b int64) int64 {
	if c, ok := Add(a, b); ok {
		return c
	}
	return math.MaxInt64
}

// Ahead returns how far the instant state lies ahead of now, within
// [0, limit], and whether it lay further ahead than limit (it is then
// limit). A state at or before now is 0 ahead.
func Ahead(state, now, limit int64) (ahead int64, beyond bool) {
	if state <= now {
		return 0, false
	}
	ahead, ok := Sub(state, now)
	if !ok || ahead > limit {
		return limit, true
	}
	return ahead, false
}

// CeilDiv returns ⌈a/b⌉ for b > 0.
func CeilDiv(a, b int64) int64 {
	q := a / b
	if a%b > 0 {
		q++
	}
	return q
}

// MulDiv returns ⌊a×b/c⌋ for a, b ≥ 0 and c > 0, computed in 128 bits,
// and false if the quotient does not fit an int64.
func MulDiv(a, b, c int64) (int64, bool) {
	q, _, ok := mulDiv(a, b, c)
	return q, ok
}

// MulDivCeil returns ⌈a×b/c⌉ for a, b ≥ 0 and c > 0, computed in 128 bits,
// and false if the quotient does not fit an int64.
func MulDivCeil(a, b, c int64) (int64, bool) {
	q, r, ok := mulDiv(a, b, c)
	if ok && r > 0 {
		if q == math.MaxInt64 {
			return 0, false
		}
		q++
	}
	return q, ok
}

func mulDiv(a, b, c int64) (q, r int64, ok bool) {
	if a < 0 || b < 0 || c <= 0 {
		panic("checked.MulDiv: negative operand or non-positive divisor")
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 0, 0, false
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq > math.MaxInt64 {
		return 0, 0, false
	}
	return int64(uq), int64(ur), true
}
