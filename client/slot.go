package client

import "github.com/seed-6b3823f5/ratelimit/internal/protocol"

// Slot is key's Redis Cluster hash slot, as CLUSTER KEYSLOT answers it:
// CRC16 (XMODEM) of the key, or of its hash tag (the first {...} with
// something inside), modulo 16384. Keys of one slot can be decided in one
// call (All); "{user:42}:rpm" and "{user:42}:tpm" share user:42's.
func Slot(key string) int { return protocol.Slot(key) }
