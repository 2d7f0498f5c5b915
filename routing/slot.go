package routing

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
)

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = 16384

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of the key's hash
// tag (the part between the first '{' and the next '}', when non-empty), or of
// the whole key, modulo 16384.
func Slot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return crc16(key) % SlotCount
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotTags maps each slot to the shortest tag "hs<n>" that hashes to it. It is
// computed once, lazily, and never changes: a pure function of the slot.
var slotTags = sync.OnceValue(func() *[SlotCount]string {
	var t [SlotCount]string
	left := SlotCount
	for n := 0; left > 0; n++ {
		tag := "hs" + strconv.Itoa(n)
		s := crc16(tag) % SlotCount
		if t[s] == "" {
			t[s] = tag
			left--
		}
	}
	return &t
})

func slotTag(slot int) string { return slotTags()[slot] }

// SlotKey is a short key in slot (its hash tag hashes there): asking a
// cluster client which master serves it asks which master serves the slot.
func SlotKey(slot int) string { return "{" + slotTag(slot) + "}" }

// SlotBytes is Slot for a key held as bytes, table-driven and
// allocation-free: the proxy computes it for every keyed command in cluster
// mode, straight from its read buffer.
func SlotBytes(key []byte) uint16 {
	if s := bytes.IndexByte(key, '{'); s >= 0 {
		if e := bytes.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for _, c := range key {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^c]
	}
	return crc % SlotCount
}

// crcTable is CRC16/XMODEM (polynomial 0x1021) by byte, for SlotBytes.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		t[i] = crc16(string([]byte{byte(i)}))
	}
	return t
}()
