package hub

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestViewOrsFamiliesAcrossNodes: what decide sees of a key's families is
// the OR of every fresh node's latest summary; a family only a node's
// older summary or a forgotten node reported is gone, and an old agent's
// unknown families make the whole key unknown.
func TestViewOrsFamiliesAcrossNodes(t *testing.T) {
	kf := func(f routing.Families) agentlink.KeyRates {
		return agentlink.KeyRates{Key: "q", Writes: 100, RecentWrites: 100, Families: f}
	}
	fams := func(v *view) routing.Families { return v.snapshot(t0, time.Minute, time.Minute).Keys["q"].Families }
	v := newView()
	v.setExpected(t0, map[string]bool{"a": true, "b": true})
	v.apply(t0, "a", 1, 1, psum(1, 0, kf(routing.FamOrdered)))
	v.apply(t0, "b", 1, 1, psum(1, 0, kf(routing.FamScript|routing.FamOrdered)))
	if got, want := fams(v), routing.FamOrdered|routing.FamScript; got != want {
		t.Fatalf("families %v, want %v", got, want)
	}
	v.apply(t0, "b", 1, 2, psum(1, 0, kf(routing.FamOrdered))) // b's clients stopped running scripts
	if got, want := fams(v), routing.FamOrdered; got != want {
		t.Fatalf("after b's next summary: families %v, want %v", got, want)
	}
	v.apply(t0, "b", 1, 3, psum(1, 0, kf(routing.FamUnknown)))
	if got := fams(v); got.Known() {
		t.Fatalf("with an old agent's key: families %v, want unknown", got)
	}
	v.forget("b")
	if got, want := fams(v), routing.FamOrdered; got != want {
		t.Fatalf("after b is forgotten: families %v, want %v", got, want)
	}
}

// TestViewSumsRefusalsOfLatestSummaries: what decide sees of a key's
// refusals is the sum of every fresh node's latest summary (each counts
// its refusals since its previous one): a node's next summary without
// refusals replaces its count, and a stale node's is left out.
func TestViewSumsRefusalsOfLatestSummaries(t *testing.T) {
	refused := func(n uint64) *agentlink.PolicySummary {
		ps := psum(1, 0, agentlink.KeyRates{Key: "q", Writes: 100, RecentWrites: 100, Families: routing.FamOrdered})
		if n > 0 {
			ps.Refused = []agentlink.KeyCount{{Key: "q", Count: n}}
		}
		return ps
	}
	got := func(v *view, at time.Time) int64 { return v.snapshot(at, time.Minute, time.Minute).Keys["q"].Refused }
	v := newView()
	v.setExpected(t0, map[string]bool{"a": true, "b": true})
	v.apply(t0, "a", 1, 1, refused(5))
	v.apply(t0, "b", 1, 1, refused(7))
	if n := got(v, t0); n != 12 {
		t.Fatalf("refused %d, want 12", n)
	}
	v.apply(t0, "b", 1, 2, refused(0))
	if n := got(v, t0); n != 5 {
		t.Fatalf("after b's summary without refusals: %d, want 5", n)
	}
	if n := got(v, t0.Add(2*time.Minute)); n != 0 {
		t.Fatalf("with every node stale: %d, want 0", n)
	}
}

// TestViewSumsMoveOutcomesOfLatestSummaries: the outcomes of the commands
// a key's move served, and their baseline, over the last report interval
// are the sum of the fresh nodes' latest summaries (one each per
// interval), the baseline weighted to the move's commands (decide.MoveSum:
// 100 commands against 1,000 direct, 0.2 % failed, and 50 against 400,
// none failed, make 0.13 % of 1,384 effective direct commands): what
// decide's MoveFailing judges first.
func TestViewSumsMoveOutcomesOfLatestSummaries(t *testing.T) {
	moved := func(m agentlink.KeyMoved) *agentlink.PolicySummary {
		ps := psum(1, 0, agentlink.KeyRates{Key: "c", Writes: 100, RecentWrites: 100, Families: routing.FamCounter})
		if m.Served > 0 {
			m.Key = "c"
			ps.Moved = []agentlink.KeyMoved{m}
		}
		return ps
	}
	got := func(v *view, at time.Time) decide.MoveOutcomes {
		return v.snapshot(at, time.Minute, time.Minute).Keys["c"].Moved[0]
	}
	v := newView()
	v.interval = time.Second
	v.setExpected(t0, map[string]bool{"a": true, "b": true})
	v.apply(t0, "a", 1, 1, moved(agentlink.KeyMoved{Served: 100, Failed: 30, BaseTotal: 1000, BaseFailed: 2}))
	v.apply(t0, "b", 1, 1, moved(agentlink.KeyMoved{Served: 50, Failed: 0, BaseTotal: 400}))
	if m, want := got(v, t0), (decide.MoveOutcomes{Served: 150, Failed: 30, BaseTotal: 1384, BaseFailed: 2}); m != want {
		t.Fatalf("moved %+v, want %+v", m, want)
	}
	v.apply(t0.Add(time.Second), "a", 1, 2, moved(agentlink.KeyMoved{}))
	if m, want := got(v, t0.Add(time.Second)), (decide.MoveOutcomes{Served: 50, BaseTotal: 400}); m != want {
		t.Fatalf("after a's summary without outcomes an interval later: %+v, want %+v", m, want)
	}
	if m := got(v, t0.Add(2*time.Minute)); m != (decide.MoveOutcomes{}) {
		t.Fatalf("with every node stale: %+v, want none", m)
	}
}
