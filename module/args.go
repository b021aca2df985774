package main

import (
	"fmt"
	"strconv"
)

// arg is one integer argument and its accepted range.
type arg struct {
	name     string
	min, max int64
	seconds  bool // a time in whole seconds
}

// rangeError names the argument and its accepted range.
func (a arg) rangeError() string {
	if a.seconds {
		return fmt.Sprintf("ERR %s must be whole seconds from %d to %d", a.name, a.min, a.max)
	}
	return fmt.Sprintf("ERR %s must be an integer from %d to %d", a.name, a.min, a.max)
}

// syntax is a limiter command's arguments after the key: positional
// integers, then one optional integer (the cost), then options in any order.
type syntax struct {
	positional []arg
	optional   arg
	def        int64 // the optional argument's default
}

// params are the parsed arguments: the positional ones in order, then the
// optional one (its default when absent).
type params struct {
	v  [4]int64
	ms bool
}

// parse fills p from args (command name, key, ...). On failure it sets o to
// the error reply and returns false.
func (s *syntax) parse(args []string, p *params, o *outcome) bool {
	i := 2 + len(s.positional)
	if len(args) < i || len(args) > maxArgs {
		o.action = actArity
		return false
	}
	for j, a := range s.positional {
		v, ok := parseInt(args[2+j])
		if !ok || v < a.min || v > a.max {
			o.fail(a.rangeError())
			return false
		}
		p.v[j] = v
	}
	p.v[len(s.positional)] = s.def
	if i < len(args) && !isOption(args[i]) {
		v, ok := parseInt(args[i])
		if !ok || v < s.optional.min || v > s.optional.max {
			o.fail(s.optional.rangeError())
			return false
		}
		p.v[len(s.positional)] = v
		i++
	}
	for ; i < len(args); i++ {
		if !isOption(args[i]) {
			o.fail(fmt.Sprintf("ERR unknown option %s: the options are MS", quote(args[i])))
			return false
		}
		p.ms = true
	}
	return true
}

// parseInt accepts base-10 signed 64-bit integers: an optional sign, then
// digits. Spaces, decimals, exponents, hex, underscores, empty strings and
// out-of-range values are refused.
func parseInt(s string) (int64, bool) {
	neg := false
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	for len(s) > 1 && s[0] == '0' {
		s = s[1:] // leading zeros, as strconv accepts them
	}
	if len(s) > 19 {
		return 0, false
	}
	var u uint64
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return 0, false
		}
		u = u*10 + uint64(d) // 19 digits fit a uint64
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// isOption reports whether s is an option keyword (MS, any case).
func isOption(s string) bool {
	return len(s) == 2 && (s[0]|0x20) == 'm' && (s[1]|0x20) == 's'
}

// quote shows untrusted input in an error: at most 32 bytes, escaped so
// that no control character or invalid UTF-8 reaches the reply.
func quote(s string) string {
	if len(s) > 32 {
		return strconv.Quote(s[:32]) + "..."
	}
	return strconv.Quote(s)
}
