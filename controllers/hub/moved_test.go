package hub

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

const movedInterval = 500 * time.Millisecond

// movedSummary is a policy summary with key c's outcomes m.
func movedSummary(m agentlink.KeyMoved) *agentlink.PolicySummary {
	ps := psum(1, 0)
	if m.Served > 0 || m.BaseTotal > 0 {
		m.Key = "c"
		ps.Moved = []agentlink.KeyMoved{m}
	}
	return ps
}

// TestViewKeepsMoveOutcomesOverWindows: a node's outcomes are kept with
// the time of their summary and summed into the windows of the last 1, 2
// and 4 report intervals, counted back from the node's last summary; a
// summary sent early (urgent) adds to its interval instead of replacing
// it.
func TestViewKeepsMoveOutcomesOverWindows(t *testing.T) {
	v := newView()
	v.interval = movedInterval
	v.setExpected(t0, map[string]bool{"a": true})
	seq := uint64(0)
	send := func(at time.Duration, served uint64) {
		seq++
		v.apply(t0.Add(at), "a", 1, seq, movedSummary(agentlink.KeyMoved{Served: served, Failed: served / 10, BaseTotal: 2 * served}))
	}
	for i := range 6 { // regular summaries of 100, 200, ... 600 commands
		send(time.Duration(i)*movedInterval, uint64(100*(i+1)))
	}
	send(5*movedInterval+20*time.Millisecond, 7) // an urgent one, just after
	h := v.snapshot(t0.Add(5*movedInterval+30*time.Millisecond), time.Minute, time.Minute).Keys["c"].Moved
	for w, want := range []int64{600 + 7, 500 + 600 + 7, 300 + 400 + 500 + 600 + 7} {
		if h[w].Served != want || h[w].BaseTotal != 2*want {
			t.Errorf("window of %d intervals: %+v, want %d served", decide.MoveWindowIntervals[w], h[w], want)
		}
	}
}

// TestUrgentSliverStillWithdraws: the flake of test/clients
// TestFailingSplitPathRolledBack. A split's path fails a fifth of the 50
// commands it serves per 500-ms interval, against 50 direct commands that
// all succeed: one interval is too few commands to tell that from noise,
// and the node often sends an urgent summary 20 ms after its regular one,
// with a sliver of an interval in it (2 served, 1 failed, 2 direct). The
// manager used to judge each node's last summary alone, and so never
// withdrew the move while urgent summaries came; judged on its last 1, 2
// and 4 intervals it withdraws from the third interval on, after every
// summary, regular or urgent.
func TestUrgentSliverStillWithdraws(t *testing.T) {
	v := newView()
	v.interval = movedInterval
	v.setExpected(t0, map[string]bool{"a": true})
	seq := uint64(0)
	failing := func(at time.Time) bool {
		_, f := decide.MoveFailing(v.snapshot(at, time.Minute, time.Minute).Keys["c"].Moved)
		return f
	}
	for i := range 10 {
		at := t0.Add(time.Duration(i) * movedInterval)
		seq++
		v.apply(at, "a", 1, seq, movedSummary(agentlink.KeyMoved{Served: 50, Failed: 11, BaseTotal: 50}))
		if f := failing(at); f != (i >= 2) {
			t.Fatalf("after regular summary %d: failing %v, want %v", i+1, f, i >= 2)
		}
		seq++
		at = at.Add(20 * time.Millisecond)
		v.apply(at, "a", 1, seq, movedSummary(agentlink.KeyMoved{Served: 2, Failed: 1, BaseTotal: 2}))
		if f := failing(at); f != (i >= 2) {
			t.Fatalf("after urgent summary %d: failing %v, want %v", i+1, f, i >= 2)
		}
	}
}

// TestFailoverThroughTheHubNeverWithdraws: property. Nodes send summaries
// at the interval, each late by up to a fifth of it, and urgent ones in
// between at random; every command fails with the same probability on
// the move's path and the direct one (a failover, an outage of the whole
// upstream: p changes at a random time, from one random value to another),
// the mix of the two fixed per node. Judged over the hub's windows, the
// rule never withdraws the move.
func TestFailoverThroughTheHubNeverWithdraws(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 35))
		v := newView()
		v.interval = movedInterval
		nodes := 1 + rng.IntN(4)
		expected := map[string]bool{}
		for n := range nodes {
			expected[string(rune('a'+n))] = true
		}
		v.setExpected(t0, expected)
		p0, p1, change := rng.Float64(), rng.Float64(), time.Duration(rng.Int64N(int64(10*movedInterval)))
		type node struct {
			name          string
			seq           uint64
			rate, baseMix float64 // commands per second on the move; direct per move command
			last          time.Time
		}
		var ns []*node
		for n := range nodes {
			ns = append(ns, &node{name: string(rune('a' + n)), rate: 10 + rng.Float64()*2000, baseMix: 0.2 + rng.Float64()*5, last: t0})
		}
		for step := range 100 { // 100 ticks of a tenth of an interval
			at := t0.Add(time.Duration(step+1) * movedInterval / 10)
			for _, n := range ns {
				due := at.Sub(n.last) >= movedInterval+time.Duration(rng.Int64N(int64(movedInterval/5)))
				if !due && rng.IntN(8) != 0 {
					continue
				}
				p := p0
				if at.Sub(t0) >= change {
					p = p1
				}
				served := int64(n.rate * at.Sub(n.last).Seconds())
				base := int64(float64(served) * n.baseMix)
				m := agentlink.KeyMoved{Served: uint64(served), BaseTotal: uint64(base)}
				m.Failed, m.BaseFailed = uint64(binomialN(rng, served, p)), uint64(binomialN(rng, base, p))
				n.seq++
				n.last = at
				v.apply(at, n.name, 1, n.seq, movedSummary(m))
				h := v.snapshot(at, time.Minute, time.Minute).Keys["c"].Moved
				if w, f := decide.MoveFailing(h); f {
					t.Fatalf("seed %d, step %d: p %.3f then %.3f, everything failing alike, withdrawn on the window of %d intervals: %+v",
						seed, step, p0, p1, decide.MoveWindowIntervals[w], h)
				}
			}
		}
	}
}

// binomialN draws the failures of n commands each failing with
// probability p (normal approximation beyond a few hundred).
func binomialN(rng *rand.Rand, n int64, p float64) int64 {
	if n > 400 {
		mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
		return min(n, max(0, int64(mean+sd*rng.NormFloat64()+0.5)))
	}
	var k int64
	for range n {
		if rng.Float64() < p {
			k++
		}
	}
	return k
}

// triggeringHub starts a hub with a fake clock and policy "ns/p" on
// node-a, past the pass it asks for once warm, and returns the count of
// the passes it asked for since (the trigger is re-armed by Snapshot).
func triggeringHub(t *testing.T) (*Hub, *clocktesting.FakeClock, *atomic.Int32) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	h := testHub(t, clk)
	triggers := new(atomic.Int32)
	h.OnTrigger(func(string) bool { triggers.Add(1); return true })
	// The policy is known before the hub starts, so that the pass it asks
	// for once warm (triggerWhenWarm) comes first, and is not counted.
	const id = "ns/p"
	h.SetPolicy(id, Params{Thresholds: Thresholds{Reads: 5000, Writes: 1000, Hysteresis: 0.2}, Window: 10 * time.Second, ReportInterval: movedInterval, TopK: 8})
	h.UpsertPod("ns/a", "node-a", agentlink.Pod{IP: "10.0.0.1", Policy: id})
	serve(t, h)
	eventually.True(t, 10*time.Second, "the pass asked for once warm", func() bool {
		clk.Step(0)
		return triggers.Load() == 1
	})
	h.Snapshot(id) // the manager's pass re-arms the trigger
	triggers.Store(0)
	return h, clk, triggers
}

// TestRefusalTriggersAPass: a summary that lists commands refused because
// of a key's move asks for a decision pass at once (the pass withdraws the
// move on any refusal), though no key changed its band; one without does
// not, and refusals again within an eighth of a report interval do not
// ask again.
func TestRefusalTriggersAPass(t *testing.T) {
	h, clk, triggers := triggeringHub(t)
	seq := uint64(0)
	send := func(after time.Duration, refused []agentlink.KeyCount) {
		seq++
		clk.Step(after)
		ps := psum(1, 0)
		ps.Policy, ps.Refused = "ns/p", refused
		h.Ingest(&agentlink.Summary{Node: "node-a", Session: 1, Seq: seq, Policies: []agentlink.PolicySummary{*ps}})
	}
	send(movedInterval, nil)
	if n := triggers.Load(); n != 0 {
		t.Fatalf("%d passes asked for by a summary without refusals", n)
	}
	send(movedInterval, []agentlink.KeyCount{{Key: "queue:jobs", Count: 3}})
	eventually.True(t, 10*time.Second, "a pass asked for by the refusals", func() bool { return triggers.Load() == 1 })
	h.Snapshot("ns/p")
	send(movedInterval/16, []agentlink.KeyCount{{Key: "queue:jobs", Count: 1}})
	if n := triggers.Load(); n != 1 {
		t.Fatalf("%d passes asked for by refusals within an eighth of an interval, want 1", n)
	}
}

// TestFailingMoveTriggersAPass: a summary whose outcomes make a move fail
// by the rule asks for a decision pass at once, though no key changed its
// band; healthy outcomes, and failures alike on both paths, do not.
func TestFailingMoveTriggersAPass(t *testing.T) {
	h, clk, triggers := triggeringHub(t)
	const id = "ns/p"
	seq := uint64(0)
	send := func(m agentlink.KeyMoved) {
		seq++
		clk.Step(movedInterval)
		ps := movedSummary(m)
		ps.Policy = id
		h.Ingest(&agentlink.Summary{Node: "node-a", Session: 1, Seq: seq, Policies: []agentlink.PolicySummary{*ps}})
	}
	send(agentlink.KeyMoved{Served: 400, Failed: 0, BaseTotal: 400})
	send(agentlink.KeyMoved{Served: 400, Failed: 380, BaseTotal: 400, BaseFailed: 370}) // a failover
	if n := triggers.Load(); n != 0 {
		t.Fatalf("%d passes asked for by healthy outcomes and a failover", n)
	}
	h.Snapshot(id)
	send(agentlink.KeyMoved{Served: 400, Failed: 100, BaseTotal: 400})
	eventually.True(t, 10*time.Second, "a pass asked for by the failing path", func() bool { return triggers.Load() == 1 })
	// A split counter's reads all failing, its increments served: 20 of
	// 220 commands, too few a share whole, but 20 of 20 reads against none
	// of 200 direct reads (decide.MoveFailingApart), in the first summary.
	h.Snapshot(id)
	for range 4 { // the failing summary's windows out of reach
		send(agentlink.KeyMoved{Served: 400, BaseTotal: 400, ReadServed: 40, BaseReads: 400})
	}
	h.Snapshot(id)
	send(agentlink.KeyMoved{Served: 220, Failed: 20, BaseTotal: 200, ReadServed: 20, ReadFailed: 20, BaseReads: 200})
	eventually.True(t, 10*time.Second, "a pass asked for by the failing reads", func() bool { return triggers.Load() == 2 })
	snap, _ := h.Snapshot(id)
	if c, i, f := decide.MoveFailingApart(snap.Keys["c"].Moved, snap.Keys["c"].MovedReads, snap.Keys["c"].MovedOthers); !f || c != decide.ReadCommands || i != 0 {
		t.Errorf("the snapshot: %v on window %d (failing %v), want the reads on the last interval", c, i, f)
	}
}
