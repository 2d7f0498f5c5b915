package decide

import (
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
			Observations: map[string]Observation{"k": {WritesPerSecond: 50_000, Families: strFams, Moved: m}}})
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
