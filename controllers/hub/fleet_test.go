package hub

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/nodeagent"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
	"github.com/heatsink-dev/heatsink/nodeagent/summary"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// fleet is the hub tests' one model of a fleet of node agents under one
// policy, and of the hub that sums them: every node runs the agent's real
// sketch (nodeagent/sketch), summary (summary.Build) and send rule
// (summary.Schedule and summary.Sender, as nodeagent's summary loop calls
// them), and the hub its real view, pins (pinCandidates, setPins) and
// decisions (decide.Decide). The tests give the traffic (fleetConfig's
// traffic) and read each pass (observe); nothing here decides anything
// the agent or the hub decides, so a bias in either shows in the tests.
//
// Time goes in steps; in each step every node's sidecars whose flush falls
// in it hand their batch to the node's sketch, then every node whose tick
// falls in it builds its summary and sends it if the send rule says so
// (the hub applies it at once), then, every pass, the hub expires,
// snapshots, chooses pins (every pinEvery, and at once on a new candidate
// if repinOnCandidate: Hub.repinSoon), which every agent applies at once
// (summary.Sender.Pins), and decides.
type fleet struct {
	fleetConfig
	th   Thresholds
	p    Params
	dir  agentlink.Directive
	spec *v1alpha1.HotKeyPolicySpec

	agents []*fleetAgent
	names  []string // the background's keys
	v      *view

	// hotAt and detected are, per key, the first pass that decided it hot
	// and its DetectedAt then.
	hotAt, detected map[string]time.Time
	// early and regular count the summaries sent before their interval was
	// up (urgent) and at it.
	early, regular int
}

// fleetConfig is what a test chooses of its fleet. Every duration is a
// multiple of step.
type fleetConfig struct {
	nodes    int
	fraction float64       // the floor fraction (DefaultFloorFraction, or a trial's)
	sustain  time.Duration // the spec's sustainFor
	step     time.Duration
	flush    time.Duration // each sidecar's flush period: a batch each (0: sidecarlink.FlushInterval)
	tick     time.Duration // the agents' tick (0: nodeagent.DefaultTick)
	pass     time.Duration // how often the hub passes: view, pins, decisions (0: every tick)
	senders  int           // sidecars a node, each flushing at its own phase (0: 1)
	// repinOnCandidate: the hub chooses the pins again as soon as a key not
	// pinned enters the warm or hot band, besides every pinEvery.
	repinOnCandidate bool
	// traffic adds sidecar j of node i's batch at now to sk (advanced to now).
	traffic func(i, j int, now time.Time, sk *sketch.Sketch)
	// pinDelay, if set, is how long a directive takes to reach node i (the
	// manager's push over its stream): until then the node counts and
	// echoes the pins it had. Nil: every node applies it at once.
	pinDelay func(i int) time.Duration
	// observe sees every pass's snapshot from the hub's start (run's
	// hubFrom) on.
	observe func(now time.Time, snap *Snapshot)
}

// fleetAgent is one simulated node.
type fleetAgent struct {
	sk      *sketch.Sketch
	zipf    *rand.Zipf
	flushAt []int // each sidecar's flush phase, in steps
	start   int   // the step of the agent's first tick: its report phase
	sched   summary.Schedule
	send    summary.Sender
	seq     uint64
	// coming are the directives on their way to it (pinDelay), in the
	// order they were sent.
	coming []sentDirective
}

// sentDirective is a directive on its way to an agent: its version and
// pins, and when it arrives.
type sentDirective struct {
	version uint64
	pins    []string
	at      time.Time
}

const (
	fleetPolicy   = "ns/p"
	fleetUniverse = 20_000 // background keys
	fleetInterval = time.Second
)

// fleetNodes is how many nodes a fleet test simulates: 1,000, or short
// with -short.
func fleetNodes(short int) int {
	if testing.Short() {
		return short
	}
	return 1000
}

// newFleet builds the fleet: thresholds 5,000 reads/s and 1,000 writes/s
// with 20 % hysteresis, a 10 s window, the report interval fleetInterval,
// the smallest sketches (full stores: a key's estimate is a bound until it
// is pinned), each node's background Zipf(1.1) over fleetUniverse keys
// drawn from rng. Phases are drawn from seed: each sidecar's flush at
// random within its period, each agent's start at random within the
// report interval (agents start, and so report, at their own times); a
// test may set them (flushAt, start) before run.
func newFleet(t *testing.T, c fleetConfig, rng *rand.Rand, seed uint64) *fleet {
	t.Helper()
	c.senders = max(c.senders, 1)
	c.flush = cmp.Or(c.flush, sidecarlink.FlushInterval)
	c.tick = cmp.Or(c.tick, nodeagent.DefaultTick)
	c.pass = cmp.Or(c.pass, c.tick)
	f := &fleet{fleetConfig: c, v: newView(), hotAt: map[string]time.Time{}, detected: map[string]time.Time{}}
	f.th = Thresholds{Reads: 5000, Writes: 1000, Hysteresis: 0.2}
	f.p = Params{Thresholds: f.th, Window: 10 * time.Second, ReportInterval: fleetInterval, TopK: 64}
	f.dir = directive(fleetPolicy, f.p, c.nodes, c.fraction, nil, 1)
	f.spec = &v1alpha1.HotKeyPolicySpec{}
	f.spec.Thresholds.ReadsPerSecond, f.spec.Thresholds.WritesPerSecond = f.th.Reads, f.th.Writes
	f.spec.Thresholds.HysteresisPercent = 20
	f.spec.Thresholds.SustainFor.Duration = c.sustain
	v1alpha1.SetDefaults(f.spec)
	f.v.th = f.th
	f.names = make([]string, fleetUniverse)
	for k := range f.names {
		f.names[k] = fmt.Sprint("bg:", k)
	}
	phases := rand.New(rand.NewPCG(seed, 0xf1ee7))
	cfg := nodeagent.SketchConfig(&f.dir, 0)
	cfg.Lead = c.flush // as the agent's: the senders' flush period (sidecarlink.FlushInterval)
	f.agents = make([]*fleetAgent, c.nodes)
	for i := range f.agents {
		sk, err := sketch.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a := &fleetAgent{sk: sk, zipf: rand.NewZipf(rng, 1.1, 1, fleetUniverse-1),
			flushAt: make([]int, c.senders), start: 1 + phases.IntN(int(fleetInterval/c.step))}
		for j := range a.flushAt {
			a.flushAt[j] = phases.IntN(int(c.flush / c.step))
		}
		f.agents[i] = a
	}
	return f
}

// background returns a key of node i's background traffic.
func (f *fleet) background(i int) string { return f.names[f.agents[i].zipf.Uint64()] }

// backgroundOp adds one background operation of node i to sk: a write one
// time in writeOneIn (drawn from rng), else a read.
func (f *fleet) backgroundOp(i int, sk *sketch.Sketch, rng *rand.Rand, writeOneIn int) {
	if rng.IntN(writeOneIn) == 0 {
		sk.Update(f.background(i), 0, 1, 64)
	} else {
		sk.Update(f.background(i), 1, 0, 64)
	}
}

// run runs the fleet from t0 (excluded) to end (included); the hub pins,
// decides and is observed from hubFrom on (before, it only takes the
// summaries).
func (f *fleet) run(t0, end, hubFrom time.Time) {
	flushSteps, tickSteps, passSteps := int(f.flush/f.step), int(f.tick/f.step), int(f.pass/f.step)
	version := uint64(1)
	var items []sketch.Item
	var st decide.State
	var pinsAt time.Time
	maxAge := StaleAfterIntervals * f.p.ReportInterval
	for n := 1; ; n++ {
		now := t0.Add(time.Duration(n) * f.step)
		if now.After(end) {
			return
		}
		for i, a := range f.agents {
			for len(a.coming) > 0 && !now.Before(a.coming[0].at) {
				a.send.Pins(a.sk, a.coming[0].pins, a.coming[0].version, now)
				a.coming = a.coming[1:]
			}
			for j, phase := range a.flushAt {
				if n%flushSteps == phase {
					a.sk.Advance(now)
					f.traffic(i, j, now, a.sk)
				}
			}
			if n < a.start || (n-a.start)%tickSteps != 0 {
				continue
			}
			// The agent's tick (nodeagent's summaryLoop and summarize).
			a.sk.Advance(now)
			items = a.sk.AppendItems(items[:0])
			tr, tw := a.sk.Tracking()
			ks, unseen := summary.Build(items, f.dir.Floor, agentlink.Rates{Reads: tr, Writes: tw}, nodeagent.DefaultMaxKeysPerSummary)
			check := a.send.Check(now, items, f.dir.Alert, a.sk.PinsCounted())
			if !a.sched.Due(now, f.p.ReportInterval, f.tick, check.Urgent) {
				continue
			}
			if a.sched.Early(now, f.p.ReportInterval) {
				f.early++
			} else {
				f.regular++
			}
			a.send.Sent(check, ks, f.p.ReportInterval)
			a.sched.Sent(now)
			a.seq++
			f.v.apply(now, fmt.Sprint("node-", i), 1, a.seq, &agentlink.PolicySummary{Policy: fleetPolicy, Directive: check.Echo, Unseen: unseen, Keys: ks})
		}
		if n%passSteps != 0 {
			continue
		}
		f.v.expire(now, maxAge)
		snap := f.v.snapshot(now, maxAge, maxAge)
		if now.Before(hubFrom) {
			continue
		}
		if candidate := f.v.takeNewCandidate(); now.Sub(pinsAt) >= pinEvery || (f.repinOnCandidate && candidate) {
			pinsAt = now
			var mitigated []string
			for _, k := range st.Keys {
				if k.ReadHot || k.WriteHot {
					mitigated = append(mitigated, k.Key)
				}
			}
			pins := f.v.pinCandidates(&snap, mitigated, f.th, 2*int(max(f.p.TopK, 8)))
			if f.v.setPins(pins, version+1) {
				version++
				for i, a := range f.agents {
					if f.pinDelay == nil {
						a.send.Pins(a.sk, pins, version, now)
						continue
					}
					// One stream per agent: directives arrive in order.
					at := now.Add(f.pinDelay(i))
					if n := len(a.coming); n > 0 && at.Before(a.coming[n-1].at) {
						at = a.coming[n-1].at
					}
					a.coming = append(a.coming, sentDirective{version, pins, at})
				}
			}
		}
		out := decide.Decide(decide.Input{Now: now, Spec: f.spec, Observations: snap.Keys, State: st, Margin: 10 * time.Second})
		st = out.State
		for _, ks := range st.Keys {
			if (ks.ReadHot || ks.WriteHot) && f.hotAt[ks.Key].IsZero() {
				f.hotAt[ks.Key] = now
				if ks.DetectedAt != nil {
					f.detected[ks.Key] = *ks.DetectedAt
				}
			}
		}
		if f.observe != nil {
			f.observe(now, &snap)
		}
	}
}
