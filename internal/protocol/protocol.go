// Package protocol holds the numbers the module's C and the engine's Go
// share: what C does once Go has decided a command (an action, and a
// write per key), what a key holds, and the sizes of the buffers between
// them. `go generate ./...` (cmd/gen) writes them into
// module/protocol_gen.h; the engine uses them by these names.
package protocol

import (
	"strings"

	"github.com/seed-6b3823f5/ratelimit/internal/spec"
)

// What call.c does once Go returns, numbered as enum rl_action.
const (
	ActError     = iota // reply the error (the default: a call Go never finished is an error)
	ActReply            // carry out each key's write, then reply the integers
	ActWrongType        // reply the standard WRONGTYPE error
	ActArity            // reply the standard wrong-number-of-arguments error
)

// What call.c writes to one key, numbered as enum rl_write.
const (
	WriteNone = iota
	WriteSet  // SET key value PXAT expire_ms
	WriteDel  // DEL key
	WriteZLog // sliding log: trim, move, add entries, expire
	WriteConc // concurrency: sweep lapsed holders, add or remove one, expire
)

// KeyKind is what a key holds, numbered as enum rl_keykind.
type KeyKind int

const (
	KeyEmpty KeyKind = iota
	KeyString
	KeyZSet
	KeyOther
)

// What C found at a LIMITS key field, numbered as enum rl_limits_kind.
const (
	LimitsAbsent    = iota // no such key, or no such field: the call's parameters stand
	LimitsFound            // the field's value
	LimitsWrongType        // the key holds something else than a hash
	LimitsUnread           // C read nothing: past MaxKeys reads in one call (never: one per limiter)
)

const (
	// MaxArgs is RL_MAX_ARGS: the most arguments, command name included.
	MaxArgs = spec.MaxArgs
	// MaxKeys is RL_MAX_KEYS: the most keys one command names.
	MaxKeys = spec.MaxKeys
	// MaxReply is RL_MAX_REPLY: RL.ALL ... EACH's six integers, five per
	// limit, and UPTO's grant.
	MaxReply = 7 + 5*MaxKeys
	// ErrCapacity is the size of C's error buffer (rl_call's err), NUL
	// included: the longest error is one byte shorter.
	ErrCapacity = 512
	// MaxMember is RL_MEMBER_MAX - 1: sorted-set members are copied up to
	// it.
	MaxMember = 63
	// SetMax is RL_SET_MAX: the longest string value Go sets.
	SetMax = 64
	// ConcSweep is RL_CONC_SWEEP (spec.ConcSweep): the most lapsed holders
	// one concurrency write removes.
	ConcSweep = spec.ConcSweep
)

// Slot is key's Redis Cluster hash slot, as CLUSTER KEYSLOT answers it:
// CRC16 (XMODEM) of the key, or of its hash tag (the first {...} with
// something inside), modulo 16384.
func Slot(key string) int {
	if tag, ok := HashTag(key); ok {
		key = tag
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// HashTag is key's hash tag, the part Slot hashes when it has one: what
// stands between its first '{' and the first '}' after it, when that is
// not empty.
func HashTag(key string) (string, bool) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j], true
		}
	}
	return "", false
}
