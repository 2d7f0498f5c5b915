package decide

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/routing"
)

// binomial draws the failures of n commands each failing with probability p.
func binomial(rng *rand.Rand, n int64, p float64) int64 {
	var k int64
	for range n {
		if rng.Float64() < p {
			k++
		}
	}
	return k
}

// TestFailoverNeverWithdrawsAMove: property, on generated intervals. When
// the move's path and the sidecars' direct traffic fail alike (a Sentinel
// failover, a whole-upstream outage, a flaky network: each command fails
// with the same probability p, from 0 to 1, whatever path it takes),
// moveFails never withdraws the move, at any count of commands on either
// side. The rule's margin (twice the baseline, or one point above it)
// must hold the binomial noise of the counts it judges.
func TestFailoverNeverWithdrawsAMove(t *testing.T) {
	for seed := range uint64(20000) {
		rng := rand.New(rand.NewPCG(seed, 33))
		p := []float64{0, 1, 0.5, 0.2}[seed%4]
		if seed >= 4 {
			p = rng.Float64()
		}
		// Counts log-uniform from the rule's minimums: small counts, the
		// noisiest, as often as large ones.
		m := MoveOutcomes{Served: minServed + rng.Int64N(1<<rng.IntN(13)), BaseTotal: minBaseline + rng.Int64N(1<<rng.IntN(15))}
		m.Failed, m.BaseFailed = binomial(rng, m.Served, p), binomial(rng, m.BaseTotal, p)
		if moveFails(m) {
			t.Fatalf("seed %d, p %.3f: %+v withdrawn", seed, p, m)
		}
		// Equal fractions, exactly: never.
		eq := MoveOutcomes{Served: m.Served, Failed: m.BaseFailed * m.Served / m.BaseTotal, BaseTotal: m.BaseTotal, BaseFailed: m.BaseFailed}
		if moveFails(eq) {
			t.Fatalf("seed %d: equal failure fractions %+v withdrawn", seed, eq)
		}
		// And over a history of report intervals (MoveFailing judges the
		// last 1, 2, 4, 8 and 16): each interval's commands fail alike, on either
		// path, with the interval's own probability (a failover starting
		// or ending between two intervals), at the same mix of the move's
		// and the direct commands in every interval (clients keep sending
		// as they did), with each interval's counts drawn anew.
		h := failoverHistory(rng)
		if i, failing := MoveFailing(h); failing {
			t.Fatalf("seed %d: everything failing alike, window of %d intervals withdrawn: %+v", seed, MoveWindowIntervals[i], h)
		}
	}
}

// failoverHistory generates a MoveHistory of 16 report intervals (newest
// first) whose commands fail alike on the move's path and the direct one:
// p per interval, constant or changing once (a failover starting or
// ending), each interval's mix of the move's and the direct commands
// drawn anew (clients whose traffic shifts; nodes whose summaries fall on
// either side of the change), summed by MoveSum as the hub sums its
// nodes' reports.
func failoverHistory(rng *rand.Rand) MoveHistory {
	served := 1 + rng.Int64N(1<<rng.IntN(11))
	base := 1 + rng.Int64N(1<<rng.IntN(13))
	const intervals = 16 // MoveWindowIntervals' longest
	p := [intervals]float64{}
	p[0] = rng.Float64()
	switch rng.IntN(3) {
	case 0: // the same all along
		for i := range p {
			p[i] = p[0]
		}
	default: // a change between two intervals
		at, q := 1+rng.IntN(intervals-1), rng.Float64()
		for i := range p {
			if i < at {
				p[i] = p[0]
			} else {
				p[i] = q
			}
		}
	}
	var h MoveHistory
	var sum MoveSum
	for i := range intervals { // i intervals back
		var m MoveOutcomes
		m.Served = 1 + rng.Int64N(2*served)
		m.BaseTotal = 1 + rng.Int64N(2*base)
		m.Failed, m.BaseFailed = binomial(rng, m.Served, p[i]), binomial(rng, m.BaseTotal, p[i])
		sum.Add(m)
		for w, n := range MoveWindowIntervals {
			if n == i+1 {
				h[w] = sum.Outcomes()
			}
		}
	}
	return h
}

// TestMoveSumWeighsTheBaselineToTheMove: one report comes back as its own
// counts; two whose mixes differ compare each report's move with its own
// direct commands. A failover between them (the first report's commands
// all fine, mostly direct; the second's all failing, mostly the move's)
// sums, as plain counts, to a move failing ten times more than direct
// traffic; weighted, to the same fraction.
func TestMoveSumWeighsTheBaselineToTheMove(t *testing.T) {
	one := MoveOutcomes{Served: 137, Failed: 13, BaseTotal: 1009, BaseFailed: 7}
	var s MoveSum
	s.Add(one)
	if got := s.Outcomes(); got != one {
		t.Fatalf("one report: %+v, want %+v", got, one)
	}
	before := MoveOutcomes{Served: 10, BaseTotal: 1000}
	after := MoveOutcomes{Served: 1000, Failed: 1000, BaseTotal: 10, BaseFailed: 10}
	plain := MoveOutcomes{Served: 1010, Failed: 1000, BaseTotal: 1010, BaseFailed: 10}
	if !moveFails(plain) {
		t.Fatalf("summed as plain counts, %+v is kept: the case shows nothing", plain)
	}
	s = MoveSum{}
	s.Add(before)
	s.Add(after)
	if got := s.Outcomes(); moveFails(got) || got.Served != 1010 || got.Failed != 1000 || got.BaseFailed*1010 < 990*got.BaseTotal {
		t.Fatalf("weighted: %+v, want the baseline failing as the move does, kept", got)
	}
	s.Add(MoveOutcomes{Served: 50, Failed: 50}) // no direct commands: left out
	if got := s.Outcomes(); got.Served != 1010 {
		t.Errorf("a report without direct commands counted: %+v", got)
	}
}

// TestFailingPathJudgedOnLongerWindows: a path that fails a fifth of what
// it serves, at a rate too low for one report interval's commands to tell
// from noise (22 served, 5 failed, against 22 direct commands, none
// failed: the flake of TestFailingSplitPathRolledBack, where an urgent
// summary came right after a regular one), is withdrawn on the longer
// windows, with their length in the reason; with every window as thin, it
// is kept.
func TestFailingPathJudgedOnLongerWindows(t *testing.T) {
	sliver := MoveOutcomes{Served: 22, Failed: 5, BaseTotal: 22}
	if moveFails(sliver) {
		t.Fatalf("%+v withdrawn on one window: the case is no longer thin", sliver)
	}
	h := MoveHistory{sliver, {Served: 90, Failed: 20, BaseTotal: 90}, {Served: 200, Failed: 44, BaseTotal: 200}}
	i, failing := MoveFailing(h)
	if !failing || MoveWindowIntervals[i] != 4 {
		t.Fatalf("%+v: failing %v on window %d, want the 4-interval window", h, failing, i)
	}
	if why := whyFailed("split", AllCommands, h, i); !strings.HasSuffix(why, "(22.0 %), against 0.0 % of the sidecars' direct commands, in the last 4 report intervals") {
		t.Errorf("reason %q", why)
	}
	if _, failing := MoveFailing(MoveHistory{sliver, sliver, sliver}); failing {
		t.Errorf("every window thin: withdrawn, want kept")
	}
	if i, failing := MoveFailing(MoveHistory{{Served: 100, Failed: 90, BaseTotal: 100}, h[1], h[2]}); !failing || i != 0 {
		t.Errorf("the last interval failing 90 %%: window %d (failing %v), want the last interval", i, failing)
	}
}

// TestLowRateFailingPathJudgedOnLongestWindows: the flake of
// TestFailingSplitPathRolledBack under load. A split counter whose reads
// all fail (one shard's node down) while its increments go to the places
// still up, at about 90 commands a second: each 500-ms interval 4 of the
// 43 commands its split served failed, against none of 40 direct ones.
// No window of up to 4 intervals tells 8 % from noise (the split stayed
// for the 60 s the test waited, its clients' reads failing); the windows
// of 8 and 16 intervals do, and the reason names the window.
func TestLowRateFailingPathJudgedOnLongestWindows(t *testing.T) {
	interval := MoveOutcomes{Served: 43, Failed: 4, BaseTotal: 40}
	var h MoveHistory
	var sum MoveSum
	for i := range MoveWindowIntervals[len(MoveWindowIntervals)-1] {
		sum.Add(interval)
		for w, n := range MoveWindowIntervals {
			if n == i+1 {
				h[w] = sum.Outcomes()
			}
		}
	}
	for w, n := range MoveWindowIntervals {
		if n <= 4 && moveFails(h[w]) {
			t.Fatalf("window of %d intervals %+v withdrawn: the case is no longer one the short windows miss", n, h[w])
		}
	}
	i, failing := MoveFailing(h)
	if !failing || MoveWindowIntervals[i] <= 4 {
		t.Fatalf("%+v: failing %v on window %d, want one of more than 4 intervals", h, failing, i)
	}
	if why := whyFailed("split", AllCommands, h, i); !strings.HasSuffix(why, fmt.Sprintf("in the last %d report intervals", MoveWindowIntervals[i])) {
		t.Errorf("reason %q", why)
	}
}

// TestFailingReadsWithdrawnApart: a split counter whose shard's node is
// down fails every read (a read sums every shard) while its increments go
// to the places still up. Summed, 20 failed of 220 commands against none
// of 200 direct ones is too few a share for one report interval; its
// reads alone, 20 of 20 against none of 200 direct reads, are withdrawn
// in the first, with the kind in the reason. Without kinds (a caller
// giving only all) the whole is judged, as before.
func TestFailingReadsWithdrawnApart(t *testing.T) {
	all := MoveOutcomes{Served: 220, Failed: 20, BaseTotal: 200}
	reads := MoveOutcomes{Served: 20, Failed: 20, BaseTotal: 200}
	others := MoveOutcomes{Served: 200} // no direct writes: no baseline
	if _, failing := MoveFailing(MoveHistory{all}); failing {
		t.Fatalf("%+v withdrawn whole: the case no longer needs the kinds apart", all)
	}
	c, i, failing := MoveFailingApart(MoveHistory{all}, MoveHistory{reads}, MoveHistory{others})
	if !failing || c != ReadCommands || i != 0 {
		t.Fatalf("reads all failing: %v on window %d (failing %v), want reads on the last interval", c, i, failing)
	}
	if why := whyFailed("split", c, MoveHistory{reads}, i); why != "split withdrawn: 20 of the 20 reads it served failed on its path (100.0 %), against 0.0 % of the sidecars' direct reads, in the last report interval" {
		t.Errorf("reason %q", why)
	}
	if c, _, failing := MoveFailingApart(MoveHistory{{Served: 100, Failed: 90, BaseTotal: 100}}, MoveHistory{}, MoveHistory{}); !failing || c != AllCommands {
		t.Errorf("no kinds, 90 of 100 failing: %v failing %v, want all withdrawn", c, failing)
	}
}

// TestFailoverOfOneKindNeverWithdraws: property, on generated histories.
// A failover that fails one kind of command more than the other on every
// path alike (direct writes answered READONLY or MASTERDOWN while reads
// are served; each kind failing with its own probability, changing once
// within the history), whatever the mixes of reads and others in the
// move's commands and in the direct ones (a counter's move serves writes
// where the direct traffic is mostly reads), never withdraws the move
// judged apart (MoveFailingApart).
func TestFailoverOfOneKindNeverWithdraws(t *testing.T) {
	for seed := range uint64(5000) {
		rng := rand.New(rand.NewPCG(seed, 35))
		reads, others := failoverHistory(rng), failoverHistory(rng)
		var all MoveHistory
		for w := range all {
			for _, m := range []MoveOutcomes{reads[w], others[w]} {
				all[w].Served += m.Served
				all[w].Failed += m.Failed
				all[w].BaseTotal += m.BaseTotal
				all[w].BaseFailed += m.BaseFailed
			}
		}
		if c, i, failing := MoveFailingApart(all, reads, others); failing {
			t.Fatalf("seed %d: each kind failing alike on both paths, %v withdrawn on the window of %d intervals: reads %+v, others %+v",
				seed, c, MoveWindowIntervals[i], reads, others)
		}
	}
}

// TestFailingPathWithdrawsAMove: property. When the move's path fails a
// fraction q of the commands it serves (a split shard's node down: q is
// the share of shards there; a copy's node loading) while direct traffic
// fails at most as often as the rule's margin allows below it, the move is
// withdrawn once there are enough commands to tell (minServed, minFailed,
// minBaseline); with fewer it is kept, whatever the fractions.
func TestFailingPathWithdrawsAMove(t *testing.T) {
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 34))
		b := rng.Float64() * 0.3
		q := min(1, max(2*b, b+0.01)*1.5+0.05+rng.Float64()*0.5) // clearly above
		m := MoveOutcomes{Served: rng.Int64N(2000) + 400, BaseTotal: rng.Int64N(10000) + 2000}
		m.Failed = int64(q * float64(m.Served))
		m.BaseFailed = int64(b * float64(m.BaseTotal))
		if !moveFails(m) {
			t.Fatalf("seed %d: path fails %.3f, direct %.3f: %+v kept", seed, q, b, m)
		}
		few := m
		switch seed % 3 {
		case 0:
			few.Served, few.Failed = minServed-1, min(m.Failed, minServed-1)
		case 1:
			few.Failed = minFailed - 1
		case 2:
			few.BaseTotal, few.BaseFailed = minBaseline-1, 0
		}
		if moveFails(few) {
			t.Fatalf("seed %d: too few commands to tell, %+v withdrawn", seed, few)
		}
	}
	if !moveFails(MoveOutcomes{Served: 20, Failed: 5, BaseTotal: 1000}) {
		t.Error("5 of 20 failed on the path, none of 1,000 direct: kept, want withdrawn")
	}
	if moveFails(MoveOutcomes{Served: 20, Failed: 5, BaseTotal: 20}) {
		t.Error("5 of 20 failed on the path, none of 20 direct (noise can do that): withdrawn, want kept")
	}
	// Few commands, all failed: a split counter's reads, 4 to 8 a second,
	// judged apart from its increments. 5 of 5 against none of 100 direct
	// reads tells; against none of 20, or 4 of 4, it does not.
	if !moveFails(MoveOutcomes{Served: 5, Failed: 5, BaseTotal: 100}) {
		t.Error("5 of 5 failed on the path, none of 100 direct: kept, want withdrawn")
	}
	if moveFails(MoveOutcomes{Served: 5, Failed: 5, BaseTotal: 20}) || moveFails(MoveOutcomes{Served: 4, Failed: 4, BaseTotal: 1000}) {
		t.Error("5 of 5 against none of 20 direct, or 4 of 4: withdrawn, want kept")
	}
}

// TestFailingSplitRolledBackAndHeld: a split in force whose path fails
// (Observation.Moved: 40 of 200 commands failed against 0.5 % of direct
// traffic) is withdrawn at the next decision with the numbers in its
// reason, and held to the cooldown; one whose path fails as much as the
// direct traffic (a failover) is kept.
func TestFailingSplitRolledBackAndHeld(t *testing.T) {
	spec := testSpec()
	cooldown := spec.Thresholds.Cooldown.Duration
	now := t0
	state := State{Keys: []KeyState{{Key: "k", WriteHot: true, Since: &now}}}
	current := &routing.Table{EpochMillis: spec.Mitigations.Split.Epoch.Milliseconds(),
		Entries: []routing.Entry{{Key: "k", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 1, Shards: 4}}}}}}
	pass := func(at time.Time, m MoveOutcomes, cur *routing.Table) KeyDecision {
		out := Decide(Input{Now: at, Spec: spec, State: state, Current: cur,
			Observations: map[string]Observation{"k": {WritesPerSecond: 50_000, Families: strFams, Moved: MoveHistory{m, m, m}}}})
		state = out.State
		return keyDecision(out, "k")
	}
	failover := MoveOutcomes{Served: 200, Failed: 190, BaseTotal: 1000, BaseFailed: 960}
	if d := pass(now, failover, current); !slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("everything failing alike (a failover): %+v, want the split kept", d)
	}
	d := pass(now, MoveOutcomes{Served: 200, Failed: 40, BaseTotal: 1000, BaseFailed: 5}, current)
	if slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) ||
		d.Reason != "split withdrawn: 40 of the 200 commands it served failed on its path (20.0 %), against 0.5 % of the sidecars' direct commands, in the last report interval" {
		t.Fatalf("the split's path failing: %+v, want it withdrawn with the numbers", d)
	}
	if d := pass(now.Add(cooldown/2), MoveOutcomes{}, nil); slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) || !strings.Contains(d.Reason, "not applied again before") {
		t.Fatalf("within the cooldown: %+v, want the split held back", d)
	}
	if d := pass(now.Add(cooldown), MoveOutcomes{}, nil); !slices.Contains(d.Mitigations, v1alpha1.MitigationSplit) {
		t.Fatalf("after the cooldown: %+v, want split again", d)
	}
}
