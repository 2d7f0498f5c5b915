package proxy

import (
	"fmt"
	"testing"

	"github.com/heatsink-dev/heatsink/routing"
)

// The proxy's byte-slice slot function must agree with routing.Slot, the
// contract the control plane uses.
func TestSlotOfMatchesRouting(t *testing.T) {
	keys := []string{"", "a", "foo", "{user1000}.following", "{}x", "a{b}c{d}", "{", "}{", "123456789"}
	for i := range 2000 {
		keys = append(keys, fmt.Sprintf("key:%d", i), fmt.Sprintf("x{tag%d}y", i))
	}
	for _, k := range keys {
		if got, want := slotOf([]byte(k)), routing.Slot(k); got != want {
			t.Errorf("slotOf(%q) = %d, routing.Slot = %d", k, got, want)
		}
	}
	if slotOf([]byte("123456789")) != 0x31c3%16384 {
		t.Error("CRC16/XMODEM check value")
	}
}

func BenchmarkSlotOf(b *testing.B) {
	key := []byte("user:{12345}:profile:settings")
	b.ReportAllocs()
	var s uint16
	for b.Loop() {
		s += slotOf(key)
	}
	_ = s
}
