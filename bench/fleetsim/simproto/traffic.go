package simproto

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Observer is a simulated sidecar's counting client (the wire client that
// sends a sidecar's key accesses to its node agent).
type Observer interface {
	Observe(policy, key string, reads, writes, bytes uint32)
}

// Value sizes reported with each operation, in bytes.
const (
	BackgroundBytes = 100
	ViralBytes      = 512
	CounterBytes    = 8
)

// Tick is how often Run checks the phase schedule, and NodeTick how often
// each simulated node hands out what it owes: a sidecar's wire client
// aggregates and sends every 100 ms anyway, so a finer tick only wakes
// 1,000 more goroutines ten times a second on the simulator's two cores.
const (
	Tick     = 10 * time.Millisecond
	NodeTick = 100 * time.Millisecond
)

// TrafficStats counts the operations Run offered.
type TrafficStats struct {
	BackgroundReads, BackgroundWrites uint64
	ViralReads, CounterWrites         uint64
	// Calls counts Observe calls (one call may carry several operations).
	Calls uint64
	// MaxGap is the longest time between two ticks of a node (or of the
	// phase schedule): how far a starved simulator fell behind (it then
	// catches up in one go).
	MaxGap time.Duration
	// Lag is, for every tick of every node, how much later than NodeTick
	// after its previous tick it ran: how far the node's simulated clock
	// (the traffic it has offered) trailed the wall clock.
	Lag Lag
}

func (s *TrafficStats) add(o TrafficStats) {
	s.BackgroundReads += o.BackgroundReads
	s.BackgroundWrites += o.BackgroundWrites
	s.ViralReads += o.ViralReads
	s.CounterWrites += o.CounterWrites
	s.Calls += o.Calls
	s.MaxGap = max(s.MaxGap, o.MaxGap)
	s.Lag.Merge(&o.Lag)
}

// Map is s for a done event's stats.
func (s TrafficStats) Map() map[string]float64 {
	m := map[string]float64{
		"background_reads": float64(s.BackgroundReads), "background_writes": float64(s.BackgroundWrites),
		"viral_reads": float64(s.ViralReads), "counter_writes": float64(s.CounterWrites),
		"observe_calls": float64(s.Calls), "max_tick_gap_seconds": s.MaxGap.Seconds(),
	}
	for k, v := range s.Lag.Stats(NodeTickLag) {
		m[k] = v
	}
	return m
}

// NodeTickLag prefixes the done event's counters of TrafficStats.Lag
// (node_tick_lag_p50_seconds, _p99_seconds, _max_seconds, _samples).
const NodeTickLag = "node_tick_lag"

// owed is how many operations rate per second owes after elapsed.
func owed(rate float64, elapsed time.Duration) uint64 {
	if elapsed <= 0 || rate <= 0 {
		return 0
	}
	return uint64(rate * elapsed.Seconds())
}

// share is how many of the first total operations of a fleet-wide sequence
// fall to node i of n when operation k goes to node k mod n: never more than
// one apart between nodes, and summing to total.
func share(total uint64, i, n int) uint64 {
	if total <= uint64(i) {
		return 0
	}
	return (total-uint64(i)-1)/uint64(n) + 1
}

// spread hands total operations to n sidecars evenly: each gets total / n,
// and the total % n left over go one each to the sidecars from next on, in
// turn. It calls give once per sidecar that gets any, and returns where the
// next remainder starts, so that over many calls no sidecar gets more than
// one operation more than another.
func spread(total uint64, n, next int, give func(i int, count uint64)) int {
	if total == 0 || n == 0 {
		return next
	}
	q, r := total/uint64(n), int(total%uint64(n))
	if q > 0 {
		for i := range n {
			c := q
			if (i-next+n)%n < r {
				c++
			}
			give(i, c)
		}
	} else {
		for k := range r {
			give((next+k)%n, 1)
		}
	}
	return (next + r) % n
}

// nodeTraffic is one simulated node's share of the traffic: operation k of
// each fleet-wide sequence (background, viral reads, counter writes) goes to
// node k mod nodes; within the node, the background goes to its sidecars in
// turn, one operation per call, and the viral key and the counter are
// spread evenly over them. So every sidecar of the fleet gets the viral key
// and the counter within one operation of every other.
type nodeTraffic struct {
	c           *Config
	node, nodes int
	sidecars    []Observer
	policyOf    []string // policy (as the wire names it) of each sidecar
	keys        []string // the background's, shared read-only
	rng         *rand.Rand
	zipf        *rand.Zipf

	bgNext int
	bgSent uint64
	hot    []hotTraffic // per policy
	stats  TrafficStats
}

// hotTraffic is one policy's hot event on one node: its viral key and
// counter, spread over the node's sidecars of that policy.
type hotTraffic struct {
	policy, viralKey, counterKey string
	sidecars                     []Observer
	viralNext, counterNext       int
	viralSent, counterSent       uint64
}

func newNodeTraffic(c *Config, node int, sidecars []Observer, keys []string) *nodeTraffic {
	rng := rand.New(rand.NewSource(c.Seed*int64(MaxNodes) + int64(node)))
	g := &nodeTraffic{
		c: c, node: node, nodes: c.Nodes, sidecars: sidecars, keys: keys, rng: rng,
		zipf: rand.NewZipf(rng, c.ZipfS, 1, uint64(len(keys)-1)),
	}
	policies := max(c.Policies, 1)
	g.hot = make([]hotTraffic, policies)
	for k := range g.hot {
		g.hot[k] = hotTraffic{policy: c.PolicyRefOf(k), viralKey: c.ViralKeyOf(k), counterKey: c.CounterKeyOf(k)}
	}
	for j, s := range sidecars {
		k := c.SidecarPolicy(j)
		g.policyOf = append(g.policyOf, g.hot[k].policy)
		g.hot[k].sidecars = append(g.hot[k].sidecars, s)
	}
	return g
}

// backgroundKeys are the background's key names, by Zipf rank.
func backgroundKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("bg:%07d", i)
	}
	return keys
}

// advance sends what the node owes after bg of background and hot of hot
// event.
func (g *nodeTraffic) advance(bg, hot time.Duration) {
	for b := share(owed(g.c.BackgroundRate, bg), g.node, g.nodes); g.bgSent < b; g.bgSent++ {
		key := g.keys[g.zipf.Uint64()]
		s, policy := g.sidecars[g.bgNext], g.policyOf[g.bgNext]
		g.bgNext = (g.bgNext + 1) % len(g.sidecars)
		if g.rng.Float64() < g.c.WriteFraction {
			s.Observe(policy, key, 0, 1, BackgroundBytes)
			g.stats.BackgroundWrites++
		} else {
			s.Observe(policy, key, 1, 0, BackgroundBytes)
			g.stats.BackgroundReads++
		}
		g.stats.Calls++
	}
	v, w := uint64(0), uint64(0)
	if i, n, ok := hotShare(g.node, g.nodes, g.c.HotNodes); ok {
		v = share(owed(g.c.ViralRate, hot), i, n)
		w = share(owed(g.c.CounterRate, hot), i, n)
	}
	for k := range g.hot {
		h := &g.hot[k]
		n := len(h.sidecars)
		if n == 0 {
			continue
		}
		if v > h.viralSent {
			h.viralNext = spread(v-h.viralSent, n, h.viralNext, func(i int, c uint64) {
				h.sidecars[i].Observe(h.policy, h.viralKey, clamp32(c), 0, clamp32(c*ViralBytes))
				g.stats.Calls++
			})
			g.stats.ViralReads += v - h.viralSent
			h.viralSent = v
		}
		if w > h.counterSent {
			h.counterNext = spread(w-h.counterSent, n, h.counterNext, func(i int, c uint64) {
				h.sidecars[i].Observe(h.policy, h.counterKey, 0, clamp32(c), clamp32(c*CounterBytes))
				g.stats.Calls++
			})
			g.stats.CounterWrites += w - h.counterSent
			h.counterSent = w
		}
	}
}

// hotShare places node among the nodes the hot keys go to (Config.HotNodes:
// every nodes/hotNodes-th when set, else every node): its index i of n, and
// whether it is one of them.
func hotShare(node, nodes, hotNodes int) (i, n int, ok bool) {
	if hotNodes <= 0 || hotNodes >= nodes {
		return node, nodes, true
	}
	stride := nodes / hotNodes
	if node%stride != 0 || node/stride >= hotNodes {
		return 0, 0, false
	}
	return node / stride, hotNodes, true
}

func clamp32(v uint64) uint32 { return uint32(min(v, 1<<32-1)) }

// schedule is the phase boundaries the nodes read: when the hot event
// began (Unix nanoseconds, 0 until it did) and how long it lasts.
type schedule struct {
	hot         atomic.Int64
	hotDuration time.Duration
}

// elapsed is how long the background and the hot event have run at now,
// each capped at the start of rest (the hot event's end, whether or not
// rest was announced yet).
func (s *schedule) elapsed(start, now time.Time) (bg, hot time.Duration) {
	end := now
	h := s.hot.Load()
	if h != 0 {
		if e := time.Unix(0, h).Add(s.hotDuration); e.Before(end) {
			end = e
		}
		hot = end.Sub(time.Unix(0, h))
	}
	return end.Sub(start), max(hot, 0)
}

// nodeTicks is one node's place in its group (runGroup): its traffic,
// what to call after each of its ticks, and when its last tick ran.
type nodeTicks struct {
	g     *nodeTraffic
	after func()
	prev  time.Time
	first bool
}

// tick hands out what the node owes at now and records how late it ran.
func (n *nodeTicks) tick(sched *schedule, start, now time.Time) {
	g := n.g
	g.stats.MaxGap = max(g.stats.MaxGap, now.Sub(n.prev))
	if !n.first {
		g.stats.Lag.Add(now.Sub(n.prev) - NodeTick)
	}
	n.prev, n.first = now, false
	g.advance(sched.elapsed(start, now))
	n.after()
}

// runGroup hands out its nodes' traffic, node k every NodeTick from
// start + phases[k], until ctx ends, then sends what each still owes (up
// to the start of rest) unless abort ended first. It wakes once per Tick
// at most, for the nodes due by then: a goroutine and a timer per node
// woke 10 × N times a second, and at 1,000 and 2,500 nodes a process the
// scheduler and the timers were a fifth of the simulator's CPU. A node's
// ticks stay NodeTick apart; its phase is rounded up to the next Tick.
// When each node is due is kept apart from the nodes (due, in nanoseconds
// from start), so that a wake scans a few cache lines, not every node.
func runGroup(ctx, abort context.Context, nodes []*nodeTicks, phases []time.Duration, sched *schedule, start time.Time) {
	due := slices.Clone(phases)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := time.Since(start)
		next := time.Duration(math.MaxInt64)
		for k, d := range due {
			if d <= now {
				at := time.Now()
				nodes[k].tick(sched, start, at)
				now = at.Sub(start)
				for d <= now { // a late node skips the ticks it missed, as a time.Ticker does
					d += NodeTick
				}
				due[k] = d
			}
			next = min(next, d)
		}
		// The nodes due within the same Tick run together.
		t.Reset(time.Until(start.Add((next + Tick - 1) / Tick * Tick)))
		select {
		case <-ctx.Done():
			if abort.Err() == nil {
				for _, n := range nodes {
					n.g.advance(sched.elapsed(start, time.Now()))
					n.after()
				}
			}
			return
		case <-t.C:
		}
	}
}

// groups is how many goroutines run a range's nodes: enough that a slow
// node holds up few others, few enough that their wakes cost little.
func groups(nodes int) int { return min(nodes, 16*runtime.GOMAXPROCS(0)) }

// Run offers c's traffic to sidecars (sidecar j of node i at index
// i*c.SidecarsPerNode+j) from start, which is when ready was printed, and
// calls phase at the start of each phase: warm-up (background) at start;
// the hot event (background, viral key and counter) from start + c.HotStart
// (announced at the first tick at or after it), for c.HotDuration; then rest (nothing) until
// start + c.Duration (or until ctx ends).
//
// Each simulated node hands out its own share every NodeTick, paced by the
// clock and out of step with the others (node i's ticks are i/Nodes of a
// NodeTick late, rounded up to a Tick): each tick sends what is owed since
// the phase began, so a node descheduled on a loaded machine catches up
// instead of offering less, and the total is bounded by the rates times
// the durations. The nodes run in groups, a goroutine each (runGroup: 16
// per core), apart from the phase schedule, so a busy node delays its
// group only; one goroutine doing every node's work would be preempted
// and wait behind every other goroutine of a loaded simulator each time
// (at 10,000 sidecars, tens of seconds), and one per node cost a wake and
// a timer per node per tick.
func Run(ctx context.Context, c *Config, sidecars []Observer, start time.Time, phase func(name string, at time.Time)) (TrafficStats, error) {
	return RunNodes(ctx, c, sidecars, start, phase, nil)
}

// RunNodes is Run that also calls afterTick, if not nil, with the node's
// index from that node's goroutine after each of its ticks (and after the
// last one): a node simulator that hands its sidecars' batches to its
// agents itself flushes them there, so that one goroutine per node both
// offers and delivers its traffic. (Run keeps its signature for the legacy
// design's node simulator, bench/fleetsim/legacy, built against this
// package.)
func RunNodes(ctx context.Context, c *Config, sidecars []Observer, start time.Time, phase func(name string, at time.Time), afterTick func(node int)) (TrafficStats, error) {
	return RunRange(ctx, c, Range{First: 0, Count: c.Nodes}, sidecars, start, phase, afterTick)
}

// Range is a contiguous part of a fleet's nodes: First, First+1, …,
// First+Count-1.
type Range struct{ First, Count int }

// RunRange is RunNodes for the nodes of r alone (sidecars holds theirs,
// sidecar j of node r.First+i at i*c.SidecarsPerNode+j; afterTick is called
// with the fleet-wide node index): a node simulator split over several
// processes runs one range in each, all from the same start, and together
// they offer exactly the traffic one process would, since each node's share
// depends on its fleet-wide index alone and the phases on start alone: the
// hot event begins at start + c.HotStart and rest c.HotDuration later, in
// every process, whenever each notices (phase is called then, with those
// times; a late process catches up, and its Lag says how late).
func RunRange(ctx context.Context, c *Config, r Range, sidecars []Observer, start time.Time, phase func(name string, at time.Time), afterTick func(node int)) (TrafficStats, error) {
	if r.First < 0 || r.Count < 1 || r.First+r.Count > c.Nodes || len(sidecars) != r.Count*c.SidecarsPerNode {
		return TrafficStats{}, fmt.Errorf("simproto: %d sidecars for nodes %d..%d of %d with %d sidecars each: want %d",
			len(sidecars), r.First, r.First+r.Count-1, c.Nodes, c.SidecarsPerNode, r.Count*c.SidecarsPerNode)
	}
	keys := backgroundKeys(c.BackgroundKeys)
	sched := schedule{hotDuration: c.HotDuration}
	nodesCtx, stopNodes := context.WithCancel(ctx)
	defer stopNodes()
	gens := make([]*nodeTraffic, r.Count)
	grouped := make([][]*nodeTicks, groups(r.Count))
	phases := make([][]time.Duration, len(grouped))
	for k := range gens {
		i := r.First + k
		gens[k] = newNodeTraffic(c, i, sidecars[k*c.SidecarsPerNode:(k+1)*c.SidecarsPerNode], keys)
		after := func() {}
		if afterTick != nil {
			after = func() { afterTick(i) }
		}
		// Nodes tick out of step, as real sidecars flush: node i's ticks
		// are i/Nodes of a NodeTick late (1,000 nodes ticking together
		// would be a burst every tick, and the simulated agents' routing
		// streams would wait behind it).
		phase := NodeTick * time.Duration(i) / time.Duration(c.Nodes)
		j := k % len(grouped)
		grouped[j] = append(grouped[j], &nodeTicks{g: gens[k], after: after, prev: start, first: true})
		phases[j] = append(phases[j], phase)
	}
	var wg sync.WaitGroup
	for j, nodes := range grouped {
		wg.Go(func() { runGroup(nodesCtx, ctx, nodes, phases[j], &sched, start) })
	}
	phase(PhaseWarmup, start)
	t := time.NewTicker(Tick)
	defer t.Stop()
	var st TrafficStats
	prev := start
	hotAt := start.Add(c.HotStart)
	restAt := hotAt.Add(c.HotDuration)
	hot, rest := false, false
	for ctx.Err() == nil {
		now := time.Now()
		st.MaxGap = max(st.MaxGap, now.Sub(prev))
		prev = now
		if !hot && !now.Before(hotAt) {
			hot = true
			sched.hot.Store(hotAt.UnixNano())
			phase(PhaseHot, hotAt)
		}
		if hot && !rest && !now.Before(restAt) {
			rest = true
			phase(PhaseRest, restAt)
		}
		// Rest is noticed up to a tick late, so the run ends once it has
		// been and the duration has passed.
		if rest && now.Sub(start) >= c.Duration {
			break
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	stopNodes()
	wg.Wait()
	for _, g := range gens {
		st.add(g.stats)
	}
	return st, nil
}
