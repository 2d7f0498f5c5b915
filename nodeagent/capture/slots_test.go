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

// TestTrackerFollowsReadonly: at a replica, reads count only after the
// connection's READONLY (until READWRITE); a connection first seen midway
// is taken as having sent it; writes there never count.
func TestTrackerFollowsReadonly(t *testing.T) {
	master := netip.MustParseAddrPort("10.0.0.1:6379")
	tr := newTracker(Limits{}, 1, 0)
	tr.setScope(Scope{Targets: []Target{{Policy: "shop/c", Namespace: "shop",
		Slots: []SlotRange{{Start: 0, End: 16383, Master: master, Replicas: []netip.AddrPort{srv}}}}},
		Pods: scopeT.Pods})
	s := &stream{client: netip.AddrPortFrom(podA, 1000)}
	s.syn(tr)
	for _, c := range []string{cmd("GET", "before"), cmd("READONLY"), cmd("GET", "during"), cmd("SET", "during", "v"),
		cmd("READWRITE"), cmd("GET", "after")} {
		tr.packet(1, s.next(c))
	}
	midway := &stream{client: netip.AddrPortFrom(podA, 1001), seq: 500}
	tr.packet(2, midway.next(cmd("GET", "midway")))
	got := totals(tr)
	for k, want := range map[string][2]uint32{"before": {0, 0}, "during": {1, 0}, "after": {0, 0}, "midway": {1, 0}} {
		if e := got["shop/c "+k]; e.Reads != want[0] || e.Writes != want[1] {
			t.Errorf("%s: %d reads, %d writes counted, want %d and %d", k, e.Reads, e.Writes, want[0], want[1])
		}
	}
	if tr.stats.NotServed != 3 {
		t.Errorf("%d not served, want 3 (a read before READONLY, a write, a read after READWRITE)", tr.stats.NotServed)
	}
}
