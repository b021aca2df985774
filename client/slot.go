package client

import "strings"

// Slot is key's Redis Cluster hash slot, as CLUSTER KEYSLOT answers it:
// CRC16 (XMODEM) of the key, or of its hash tag (the first {...} with
// something inside), modulo 16384. Keys of one slot can be decided in one
// call (All); "{user:42}:rpm" and "{user:42}:tpm" share user:42's.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
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
