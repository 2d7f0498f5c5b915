package capture

import (
	"net/netip"
	"testing"

	"github.com/heatsink-dev/heatsink/routing"
)

// TestSlotTableServes: the decision of where a cluster command counts.
func TestSlotTableServes(t *testing.T) {
	ap := netip.MustParseAddrPort
	m1, r1, m2, seed := ap("10.0.0.1:6379"), ap("10.0.0.2:6379"), ap("10.0.0.3:6379"), ap("10.96.0.10:6379")
	st := compileSlots([]SlotRange{
		{Start: 0, End: 8191, Master: m1, Replicas: []netip.AddrPort{r1}},
		{Start: 8192, End: 16000, Master: m2}, // 16001..16383 served by none
	})
	var low, high, none []byte
	for i := 0; low == nil || high == nil || none == nil; i++ {
		k := []byte("k" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676)))
		switch s := routing.SlotBytes(k); {
		case s <= 8191 && low == nil:
			low = k
		case s >= 8192 && s <= 16000 && high == nil:
			high = k
		case s > 16000 && none == nil:
			none = k
		}
	}
	for _, c := range []struct {
		name            string
		at              netip.AddrPort
		key             []byte
		write, readonly bool
		want            bool
	}{
		{"master, write", m1, low, true, false, true},
		{"master, read", m1, low, false, false, true},
		{"other master (MOVED/ASK)", m2, low, false, false, false},
		{"replica read with READONLY", r1, low, false, true, true},
		{"replica read without READONLY (MOVED)", r1, low, false, false, false},
		{"replica write (MOVED)", r1, low, true, true, false},
		{"replica of another master", r1, high, false, true, false},
		{"second master", m2, high, true, false, true},
		{"slot served by none", m2, none, false, false, false},
		{"not a node (a Service in front)", seed, low, false, false, false},
	} {
		if got := st.serves(st.node(c.at), c.key, c.write, c.readonly); got != c.want {
			t.Errorf("%s: serves = %v, want %v", c.name, got, c.want)
		}
	}
	if compileSlots(nil) != nil {
		t.Errorf("no ranges: a table, want none (standalone)")
	}
	if got := len(st.nodes); got != 3 {
		t.Errorf("%d nodes, want 3", got)
	}
}
