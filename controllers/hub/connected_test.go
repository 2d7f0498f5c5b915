package hub

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConnectedAgentsCounted: the fleet_agents gauge follows attach,
// replacement, a stream dropped for a full queue, a stale detach and
// detach, without counting the nodes on each (a reconnection storm at
// 5,000 nodes was quadratic under the hub's lock). The stream dropped for
// a full queue was still counted before.
func TestConnectedAgentsCounted(t *testing.T) {
	h, err := New(Options{Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	stream := func() *agentStream { return &agentStream{out: make(chan queued, 8), done: make(chan struct{})} }
	want := func(n int) {
		t.Helper()
		if got := testutil.ToFloat64(h.metrics.agents); got != float64(n) {
			t.Fatalf("fleet_agents %v, want %d", got, n)
		}
	}
	a1, a2, b := stream(), stream(), stream()
	h.attach("a", a1)
	h.attach("b", b)
	want(2)
	h.attach("a", a2) // a reconnects
	want(2)
	h.mu.Lock()
	for i := 0; i <= cap(b.out) && h.nodes["b"].stream != nil; i++ { // fill b's queue: one more drops it
		h.queue("b", queued{line: []byte(fmt.Sprint(i))})
	}
	h.mu.Unlock()
	want(1)
	h.detach("b", b)  // already dropped
	h.detach("a", a1) // stale
	want(1)
	h.detach("a", a2)
	want(0)
}
