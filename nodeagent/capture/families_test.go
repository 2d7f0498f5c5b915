package capture

import (
	"net/netip"
	"testing"

	"github.com/heatsink-dev/heatsink/routing"
)

// TestCaptureCountsFamilies: a key counted from packets carries the
// families of its commands, as a sidecar's counts do, so a queue seen
// only by the capture is not split either.
func TestCaptureCountsFamilies(t *testing.T) {
	for _, unbatched := range []bool{false, true} {
		tr := newTracker(Limits{}, 1, 0)
		tr.unbatched = unbatched
		tr.setScope(scopeT)
		s := &stream{client: netip.AddrPortFrom(podA, 40000), seq: 1000}
		s.syn(tr)
		tr.packet(1, s.next(cmd("LPUSH", "queue:jobs", "a")+cmd("RPOP", "queue:jobs")+cmd("INCR", "hits")+cmd("GET", "hits")))
		got := totals(tr)
		if f := got["shop/p queue:jobs"].Families; f != routing.FamOrdered {
			t.Errorf("unbatched %v: queue:jobs families %v, want list/stream", unbatched, f)
		}
		if f := got["shop/p hits"].Families; f != routing.FamCounter|routing.FamStringRead {
			t.Errorf("unbatched %v: hits families %v, want counter,string-read", unbatched, f)
		}
	}
}
