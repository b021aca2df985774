// Package checked is int64 arithmetic that reports overflow instead of
// wrapping. The limiter packages compute in nanoseconds since the Unix
// epoch, where a wrapped value would silently admit or refuse everything.
package checked

import "math"

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

// CeilDiv returns ⌈a/b⌉ for b > 0.
func CeilDiv(a, b int64) int64 {
	q := a / b
	if a%b > 0 {
		q++
	}
	return q
}
