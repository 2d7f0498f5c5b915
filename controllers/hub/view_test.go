package hub

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
)

var t0 = time.Unix(1_000_000, 0)

func psum(directive uint64, unseen float64, keys ...agentlink.KeyRates) *agentlink.PolicySummary {
	return &agentlink.PolicySummary{Policy: "ns/p", Directive: directive, Unseen: agentlink.Rates{Reads: unseen}, Keys: keys}
}

func kr(key string, reads float64) agentlink.KeyRates {
	return agentlink.KeyRates{Key: key, Reads: reads, RecentReads: reads}
}

func TestViewSumsBoundsAndExactness(t *testing.T) {
	v := newView()
	v.setExpected(t0, map[string]bool{"a": true, "b": true, "c": true})
	v.apply(t0, "a", 1, 1, psum(1, 10, kr("k", 100)))
	v.apply(t0, "b", 1, 1, psum(1, 20, kr("k", 50)))
	v.apply(t0, "c", 1, 1, psum(1, 30))
	snap := v.snapshot(t0, time.Minute, time.Minute)
	if e := snap.Estimates["k"]; e.Lower.Reads != 150 || e.Upper.Reads != 180 || e.Exact {
		t.Fatalf("k = %+v, want lower 150, upper 150 + c's unseen 30, not exact", e)
	}
	if o := snap.Keys["k"]; o.ReadsPerSecond != 180 || !o.Bound {
		t.Fatalf("decisions take %+v, want the upper bound 180, marked a bound", o)
	}
	if snap.Unseen.Reads != 60 || snap.FreshNodes != 3 || snap.StaleNodes != 0 {
		t.Fatalf("unseen %v fresh %d stale %d, want 60, 3, 0", snap.Unseen.Reads, snap.FreshNodes, snap.StaleNodes)
	}

	// Pinned at directive 2: exact only once every node applied it.
	v.setPins([]string{"k"}, 2)
	v.apply(t0, "a", 1, 2, psum(2, 10, kr("k", 100)))
	v.apply(t0, "b", 1, 2, psum(2, 20, kr("k", 50)))
	if e := v.snapshot(t0, time.Minute, time.Minute).Estimates["k"]; e.Exact {
		t.Fatalf("exact before node c applied the pin: %+v", e)
	}
	v.apply(t0, "c", 1, 2, psum(2, 30)) // c pinned k and saw none of it
	snap = v.snapshot(t0, time.Minute, time.Minute)
	if e := snap.Estimates["k"]; !e.Exact || e.Upper.Reads != 150 || snap.Keys["k"].ReadsPerSecond != 150 || snap.Keys["k"].Bound {
		t.Fatalf("k = %+v (decided %+v), want exact 150, a count", e, snap.Keys["k"])
	}
}

// With no Unseen anywhere an estimate is a count; a key every node lists
// is still a bound while another key's nodes have Unseen.
func TestViewCountsWithoutUnseen(t *testing.T) {
	v := newView()
	v.setExpected(t0, map[string]bool{"a": true, "b": true})
	v.apply(t0, "a", 1, 1, psum(1, 0, kr("k", 100)))
	v.apply(t0, "b", 1, 1, psum(1, 0))
	if o := v.snapshot(t0, time.Minute, time.Minute).Keys["k"]; o.Bound || o.ReadsPerSecond != 100 {
		t.Fatalf("k with no Unseen anywhere = %+v, want the count 100", o)
	}
	v.apply(t0, "a", 1, 2, psum(1, 5, kr("k", 100)))
	v.apply(t0, "b", 1, 2, psum(1, 5, kr("k", 50)))
	if o := v.snapshot(t0, time.Minute, time.Minute).Keys["k"]; !o.Bound || o.ReadsPerSecond != 150 {
		t.Fatalf("k listed by every node, unpinned = %+v, want 150 as a bound", o)
	}
}

// A key over its threshold on the bound that turns exact, still over, is
// a band change: the pass whose sustainFor ran out on the bound waits for
// the count (decide.Observation.Bound), so the hub must ask for one.
func TestBandChangeWhenAKeyOverTurnsExact(t *testing.T) {
	v := newView()
	v.th = Thresholds{Reads: 100, Writes: 100, Hysteresis: 0.2}
	v.setExpected(t0, map[string]bool{"a": true, "b": true})
	v.apply(t0, "a", 1, 1, psum(1, 10, kr("k", 150)))
	v.apply(t0, "b", 1, 1, psum(1, 10))
	v.rebandAll(t0) // as the sweep does: b's Unseen is in k's bound now
	v.takeBandChange()
	v.setPins([]string{"k"}, 2)
	v.apply(t0, "a", 1, 2, psum(2, 10, kr("k", 150)))
	if v.takeBandChange() {
		t.Fatal("band change before every node applied the pin")
	}
	v.apply(t0, "b", 1, 2, psum(2, 10))
	v.rebandAll(t0) // exactness follows the slowest node's directive (the sweep re-bands)
	if !v.takeBandChange() {
		t.Fatal("no band change when the key over its threshold turned exact")
	}
	if o := v.snapshot(t0, time.Minute, time.Minute).Keys["k"]; o.Bound || o.ReadsPerSecond != 150 {
		t.Fatalf("k = %+v, want the count 150", o)
	}
	// A cold key turning exact is no change.
	v.apply(t0, "a", 1, 3, psum(2, 10, kr("k", 150), kr("c", 5)))
	v.takeBandChange()
	v.setPins([]string{"k", "c"}, 3)
	v.apply(t0, "a", 1, 4, psum(3, 10, kr("k", 150), kr("c", 5)))
	v.apply(t0, "b", 1, 3, psum(3, 10))
	v.rebandAll(t0)
	if v.takeBandChange() {
		t.Fatal("band change when a cold key turned exact")
	}
}

func TestViewOrdersSummariesAndForgetsSilentNodes(t *testing.T) {
	v := newView()
	v.setExpected(t0, map[string]bool{"a": true, "b": true})
	v.apply(t0, "a", 1, 5, psum(1, 0, kr("k", 100)))
	v.apply(t0, "a", 1, 4, psum(1, 0, kr("k", 999))) // late duplicate: ignored
	if got := v.snapshot(t0, time.Minute, time.Minute).Keys["k"].ReadsPerSecond; got != 100 {
		t.Fatalf("after a late summary k = %d, want 100", got)
	}
	v.apply(t0, "a", 2, 1, psum(1, 0, kr("k", 7))) // restarted agent: new session
	if got := v.snapshot(t0, time.Minute, time.Minute).Keys["k"].ReadsPerSecond; got != 7 {
		t.Fatalf("after a restart k = %d, want 7", got)
	}
	if v.heardFromAll(t0) {
		t.Fatal("heard from all before b sent anything")
	}
	v.apply(t0.Add(time.Second), "b", 1, 1, psum(1, 0, kr("k", 3)))
	if !v.heardFromAll(t0) {
		t.Fatal("not heard from all after every expected node sent")
	}

	// a goes silent: after maxAge it stops counting, and being expected
	// (its pods are still there) it is stale, once the grace is over.
	later := t0.Add(10 * time.Second)
	v.expire(later, 3*time.Second)
	v.apply(later, "b", 1, 2, psum(1, 0, kr("k", 3)))
	snap := v.snapshot(later, 3*time.Second, 3*time.Second)
	if snap.Keys["k"].ReadsPerSecond != 3 || snap.FreshNodes != 1 || snap.StaleNodes != 1 {
		t.Fatalf("k %d fresh %d stale %d, want 3, 1, 1", snap.Keys["k"].ReadsPerSecond, snap.FreshNodes, snap.StaleNodes)
	}
	// Its pods go: it is forgotten, not stale.
	v.setExpected(later, map[string]bool{"b": true})
	if snap := v.snapshot(later, 3*time.Second, 3*time.Second); snap.StaleNodes != 0 {
		t.Fatalf("stale %d after the node's pods went, want 0", snap.StaleNodes)
	}
}

func TestPinCandidates(t *testing.T) {
	th := Thresholds{Reads: 1000, Writes: 100, Hysteresis: 0.2}
	v := newView()
	v.setExpected(t0, map[string]bool{"a": true})
	v.apply(t0, "a", 1, 1, psum(1, 0, kr("hot", 2000), kr("warm", 850), kr("cool", 700), kr("cold", 10)))
	snap := v.snapshot(t0, time.Minute, time.Minute)
	got := v.pinCandidates(&snap, []string{"mitigated"}, th, 10)
	want := []string{"hot", "mitigated", "warm"}
	if len(got) != len(want) {
		t.Fatalf("pins %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pins %v, want %v", got, want)
		}
	}
	// A pinned key stays pinned down to half the warm band ("cool" at
	// 0.7 of the threshold would not be pinned, but stays once it is).
	v.setPins([]string{"cool"}, 2)
	if got := v.pinCandidates(&snap, nil, th, 10); len(got) != 3 {
		t.Fatalf("pins %v, want hot, warm and the sticky cool", got)
	}
	// The limit keeps the mitigated keys, then the hottest.
	if got := v.pinCandidates(&snap, []string{"mitigated"}, th, 2); len(got) != 2 || got[0] != "hot" || got[1] != "mitigated" {
		t.Fatalf("pins %v with limit 2, want hot and mitigated", got)
	}
}
