package hub

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/agentlink"
)

func sized(big ...agentlink.KeySize) *agentlink.PolicySummary {
	return &agentlink.PolicySummary{Policy: "ns/p", BigKeys: big}
}

// TestViewMergesBigKeys: a key's size is the largest any fresh node saw,
// a silent node's sizes are not counted, and the list is bounded.
func TestViewMergesBigKeys(t *testing.T) {
	v := newView()
	v.apply(t0, "a", 1, 1, sized(agentlink.KeySize{Key: "blob", Bytes: 20 << 20}, agentlink.KeySize{Key: "hash", Bytes: 1 << 20}))
	v.apply(t0, "b", 1, 1, sized(agentlink.KeySize{Key: "hash", Bytes: 5 << 20}, agentlink.KeySize{Key: "b-only", Bytes: 100}))
	v.apply(t0.Add(-2*time.Minute), "old", 1, 1, sized(agentlink.KeySize{Key: "stale", Bytes: 1 << 30}))
	got := v.snapshot(t0, time.Minute, time.Minute).BigKeys
	want := []agentlink.KeySize{{Key: "blob", Bytes: 20 << 20}, {Key: "hash", Bytes: 5 << 20}, {Key: "b-only", Bytes: 100}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}

	for i := 0; i < 3; i++ {
		var ks []agentlink.KeySize
		for j := 0; j < agentlink.MaxBigKeysPerPolicy; j++ {
			ks = append(ks, agentlink.KeySize{Key: fmt.Sprintf("n%d-k%d", i, j), Bytes: uint64(1000 + j)})
		}
		v.apply(t0, fmt.Sprintf("n%d", i), 1, 1, sized(ks...))
	}
	got = v.snapshot(t0, time.Minute, time.Minute).BigKeys
	if len(got) != MaxBigKeys || got[0].Key != "blob" || got[1].Key != "hash" {
		t.Fatalf("%d big keys, first %+v", len(got), got[:2])
	}
}
