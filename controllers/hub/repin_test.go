package hub

import (
	"context"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// TestCandidatePinnedAtOnce: a summary that puts a key not pinned in the
// warm band gets it pinned (a new directive) without waiting for a sweep:
// the fake clock never moves, so no sweep tick comes.
func TestCandidatePinnedAtOnce(t *testing.T) {
	h, _, id := hubWithPolicy(t)
	h.UpsertPod("ns/a", "node-a", agentlink.Pod{IP: "10.0.0.1", Policy: id})
	pins := func() []string {
		h.mu.RLock()
		defer h.mu.RUnlock()
		return slices.Clone(h.policies[id].dir.Pins)
	}
	summary := func(seq uint64, reads float64) *agentlink.Summary {
		return &agentlink.Summary{Node: "node-a", Session: 1, Seq: seq, Policies: []agentlink.PolicySummary{{
			Policy: id, Keys: []agentlink.KeyRates{{Key: "cool", Reads: 100}, {Key: "warm", Reads: reads}}}}}
	}
	h.Ingest(summary(1, 1000)) // cold: nothing to pin
	if p := pins(); len(p) != 0 {
		t.Fatalf("pins %v with every key cold", p)
	}
	h.Ingest(summary(2, 4500)) // 0.9 × the threshold: warm
	eventually.True(t, 20*time.Second, "the warm key pinned without a sweep tick", func() bool {
		return slices.Equal(pins(), []string{"warm"})
	})
}

// hubWithPolicy serves a hub on a fake clock, with policy id: 5,000
// reads/s and 1,000 writes/s, a report interval of 1 s.
func hubWithPolicy(t *testing.T) (*Hub, *clocktesting.FakeClock, string) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	h := testHub(t, clk)
	serve(t, h)
	const id = "ns/p"
	h.SetPolicy(id, Params{Thresholds: Thresholds{Reads: 5000, Writes: 1000, Hysteresis: 0.2}, Window: 10 * time.Second, ReportInterval: time.Second, TopK: 8})
	return h, clk, id
}

// testHub is a hub on clk, not yet serving (serve).
func testHub(t *testing.T, clk *clocktesting.FakeClock) *Hub {
	t.Helper()
	h, err := New(Options{Addr: "127.0.0.1:0", Token: "t", Clock: clk, WarmUp: -1})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// serve starts h, serving until the test ends.
func serve(t *testing.T, h *Hub) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, err := h.Addr(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUpsertPodUnchangedKeepsCounts: an unchanged pod upserted again (an
// informer update, a resync) changes nothing: its node is not forgotten,
// so the view keeps its counts and how long a key has been over. Before,
// the upsert removed the pod and added it back, and the key read over for
// 0 s.
func TestUpsertPodUnchangedKeepsCounts(t *testing.T) {
	h, clk, id := hubWithPolicy(t)
	pod := agentlink.Pod{IP: "10.0.0.1", Policy: id}
	h.UpsertPod("ns/a", "node-a", pod)
	h.Ingest(&agentlink.Summary{Node: "node-a", Session: 1, Seq: 1, Policies: []agentlink.PolicySummary{{
		Policy: id, Keys: []agentlink.KeyRates{{Key: "hot", Reads: 6000, RecentReads: 6000}}}}})
	clk.Step(3 * time.Second)
	h.UpsertPod("ns/a", "node-a", pod)
	snap, _ := h.Snapshot(id)
	if o, ok := snap.Keys["hot"]; !ok || o.ReadsPerSecond != 6000 || o.ReadsOverFor != 3*time.Second {
		t.Fatalf("after an unchanged upsert: %+v (listed %v), want 6000 reads/s over for 3s", o, ok)
	}
}
