package capture

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// TestAggTableCountsEveryKeyExactly checks the table against a map over
// intervals that grow it (many times its first size, the arena moving
// under keys already handed out), repeat keys, and hit the key bound.
func TestAggTableCountsEveryKeyExactly(t *testing.T) {
	var a aggTable
	for round, n := range []int{5000, 10, 3000, 0, 20000} {
		const maxKeys = 16384
		want := map[string]uint32{}
		dropped := 0
		for i := range 3 * n {
			k := fmt.Sprintf("r%d:key:%d", round%2, (i*7919)%n) // each key three times, interleaved
			e := a.entry([]byte(k), maxKeys)
			if e == nil {
				dropped++
				continue
			}
			e.Reads++
			want[k]++
		}
		if wantDropped := 3 * max(n-maxKeys, 0); dropped != wantDropped {
			t.Fatalf("round %d: %d dropped, want %d", round, dropped, wantDropped)
		}
		got := map[string]uint32{}
		for _, e := range a.entries {
			if _, dup := got[string(e.Key)]; dup {
				t.Fatalf("round %d: key %q twice", round, e.Key)
			}
			got[string(e.Key)] = e.Reads
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d keys, want %d", round, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("round %d: %q counted %d, want %d", round, k, got[k], v)
			}
		}
		a.reset()
		if len(a.entries) != 0 {
			t.Fatalf("round %d: %d entries after reset", round, len(a.entries))
		}
	}
}

func TestTrackerFlushScalesAndStartsOver(t *testing.T) {
	tr := newTracker(Limits{}, 4, 0)
	tr.setScope(scopeT)
	s := &stream{client: netip.AddrPortFrom(podA, 40000)}
	s.syn(tr)
	tr.packet(1, s.next(cmd("GET", "a")+cmd("SET", "a", "vv")+cmd("GET", "b")))
	got := totals(tr)
	if a, b := got["shop/p a"], got["shop/p b"]; a.Reads != 4 || a.Writes != 4 || a.Bytes != 4*uint32(len(cmd("SET", "a", "vv"))) || b.Reads != 4 {
		t.Fatalf("got %+v, want each count × 4", got)
	}
	tr.packet(2, s.next(cmd("GET", "b")))
	if got := totals(tr); len(got) != 1 || got["shop/p b"].Reads != 4 {
		t.Fatalf("second interval: %+v, want b's one read × 4 only", got)
	}
	if got := totals(tr); len(got) != 0 {
		t.Fatalf("an interval without commands: %+v", got)
	}
	var calls int
	tr.flush(func(string, []sidecarlink.Entry) { calls++ })
	if calls != 0 {
		t.Fatalf("sink called %d times for no keys", calls)
	}
}
