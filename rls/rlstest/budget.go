package rlstest

import "strings"

// TokenBudget runs Envoy AI Gateway's token budget as Envoy does, for n
// requests whose responses each use tokens: before each request a check
// (the descriptor's hits_addend 0), enforced; after each admitted one a
// charge of its tokens, whose answer Envoy ignores; a refused request
// never reaches the model and charges nothing. ask sends one descriptor
// with the hits_addend given and tells whether the answer was OK. It
// returns the checks' answers in order, O for OK and X for OVER_LIMIT.
func TokenBudget(n int, tokens uint64, ask func(hits uint64) bool) string {
	var b strings.Builder
	for range n {
		if !ask(0) {
			b.WriteByte('X')
			continue
		}
		b.WriteByte('O')
		ask(tokens)
	}
	return b.String()
}
