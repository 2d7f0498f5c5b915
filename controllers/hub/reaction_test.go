package hub

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
)

// TestReactionAtAThousandNodes: issue 36's measure in the hub's fleet model
// (fleet_test.go: the agents' sketch, summary and send rule, the hub's
// view, pins and decisions), with what the other fleet tests leave out: a
// directive reaches each node after its own delay, drawn from [0, 300 ms)
// (the manager's push over a thousand streams: the fleet simulator's agents
// held a routing version 264–429 ms after it at p99), so a new pin's echoes
// come in over that long and the key's count is exact only after the last.
// A read key and a counter step from nothing to 1.1 × their thresholds,
// spread evenly over 1,000 nodes or over 1 % of them, with sustainFor 1 s;
// each node's ten sidecars flush every 100 ms at their own phases. A read
// key and a counter at 0.95 × their thresholds, spread evenly alongside,
// are never decided hot; each 1.1 × key is, within the detection budget
// (DetectionBudget) plus the push delay from its traffic's start. How long
// after its crossing plus sustainFor each is decided is logged: the
// target (issue 36: every sidecar applying the move within half a second
// beyond sustainFor of the crossing, p99, which leaves publication and
// fan-out nothing if the decision alone takes it) is not met here (see
// docs/design.md, "The reaction budget").
//
// The 0.95 × keys are what a faster echo of new pins risks: counts since a
// pin start at the node's last batch (sketch.Pin), while each sidecar's
// first batch after it carries its traffic from its own previous flush, so
// a short span reads high; MinSpan, which a short span is rated over,
// reads it low instead. Echoing only once the counts span MinSpan, or
// following the echo up after 200 ms instead of half an interval, made
// the 0.95 × counter hot here (1.85 s and 1.75 s into its traffic).
func TestReactionAtAThousandNodes(t *testing.T) {
	nodes := fleetNodes(100)
	for _, c := range []struct {
		name string
		hot  int // nodes carrying the 1.1 × keys
		seed uint64
	}{
		{"even", nodes, 1},
		{"even", nodes, 2},
		{"on 1 % of the nodes", nodes / 100, 3},
		{"on 1 % of the nodes", nodes / 100, 4},
	} {
		t.Run(fmt.Sprintf("%s, seed %d", c.name, c.seed), func(t *testing.T) {
			t.Parallel()
			checkReaction(t, nodes, max(c.hot, 1), c.seed)
		})
	}
}

// reactionKey is one key of checkReaction's traffic.
type reactionKey struct {
	name   string
	writes bool
	factor float64 // of its threshold
	hot    int     // it is spread evenly over nodes [0, hot)
}

func checkReaction(t *testing.T, nodes, hot int, seed uint64) {
	const (
		step      = 10 * time.Millisecond
		sustain   = time.Second
		senders   = 10
		warmup    = 12 * time.Second
		after     = 3500 * time.Millisecond
		bgPerNode = 20.0 // ops/s, a tenth of them writes
		maxPush   = 300 * time.Millisecond
	)
	rng := rand.New(rand.NewPCG(seed, 0x4ea))
	f := newFleet(t, fleetConfig{nodes: nodes, fraction: DefaultFloorFraction, sustain: sustain, step: step,
		senders: senders, pass: 5 * step, repinOnCandidate: true}, rng, seed)
	push := make([]time.Duration, nodes)
	for i := range push {
		push[i] = time.Duration(rng.Int64N(int64(maxPush/time.Millisecond))) * time.Millisecond
	}
	f.pinDelay = func(i int) time.Duration { return push[i] }
	keys := []reactionKey{
		{"read-1.1", false, 1.1, hot}, {"counter-1.1", true, 1.1, hot},
		{"read-0.95", false, 0.95, nodes}, {"counter-0.95", true, 0.95, nodes},
	}
	// acc carries each sender's fractional operations over: [key] and the
	// background last.
	acc := make([][]float64, nodes*senders)
	for i := range acc {
		acc[i] = make([]float64, len(keys)+1)
		for j := range acc[i] {
			acc[i][j] = rng.Float64()
		}
	}
	t0 := time.Unix(1_000_000, 0)
	start := t0.Add(warmup)
	perFlush := f.flush.Seconds() / senders
	f.traffic = func(i, j int, now time.Time, sk *sketch.Sketch) {
		a := acc[i*senders+j]
		bg := &a[len(keys)]
		for *bg += bgPerNode * perFlush; *bg >= 1; *bg-- {
			f.backgroundOp(i, sk, rng, 10)
		}
		if now.Before(start) {
			return
		}
		for k, key := range keys {
			if i >= key.hot {
				continue
			}
			rate := key.factor * float64(f.th.Reads)
			if key.writes {
				rate = key.factor * float64(f.th.Writes)
			}
			a[k] += rate / float64(key.hot) * perFlush
			if c := math.Floor(a[k]); c > 0 {
				a[k] -= c
				if key.writes {
					sk.Update(key.name, 0, uint32(c), 64)
				} else {
					sk.Update(key.name, uint32(c), 0, 64)
				}
			}
		}
	}
	f.run(t0, start.Add(after), start.Add(-5*time.Second))
	for _, key := range keys {
		at, decided := f.hotAt[key.name]
		if key.factor < 1 {
			if decided {
				t.Errorf("%s decided hot %v after its traffic started", key.name, at.Sub(start))
			}
			continue
		}
		// The step to factor × the threshold crosses it 1/factor s in.
		crossing := start.Add(time.Duration(float64(time.Second) / key.factor))
		if !decided {
			t.Errorf("%s never decided hot", key.name)
			continue
		}
		beyond := at.Sub(crossing) - sustain
		t.Logf("%s: decided %v after its traffic started, %v beyond sustainFor from its crossing", key.name, at.Sub(start), beyond)
		if budget := DetectionBudget(f.p.Window, f.p.ReportInterval, sustain, f.flush, f.tick) + maxPush; at.Sub(start) > budget {
			t.Errorf("%s decided %v after its traffic started, over the detection budget plus the push, %v", key.name, at.Sub(start), budget)
		}
	}
}
