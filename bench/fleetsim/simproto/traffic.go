package simproto

import (
	"context"
	"fmt"
	"math/rand"
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

// Tick is how often Run hands out the operations owed.
const Tick = 10 * time.Millisecond

// TrafficStats counts the operations Run offered.
type TrafficStats struct {
	BackgroundReads, BackgroundWrites uint64
	ViralReads, CounterWrites         uint64
	// Calls counts Observe calls (one call may carry several operations).
	Calls uint64
	// MaxGap is the longest time between two ticks: how far a starved
	// sender fell behind (it then catches up in one go).
	MaxGap time.Duration
}

// Map is s for a done event's stats.
func (s TrafficStats) Map() map[string]float64 {
	return map[string]float64{
		"background_reads": float64(s.BackgroundReads), "background_writes": float64(s.BackgroundWrites),
		"viral_reads": float64(s.ViralReads), "counter_writes": float64(s.CounterWrites),
		"observe_calls": float64(s.Calls), "max_tick_gap_seconds": s.MaxGap.Seconds(),
	}
}

// generator owes operations by elapsed time and hands them to the sidecars:
// the background one operation per call to the next sidecar in turn, the
// viral key and the counter spread evenly over every sidecar (each gets the
// same share, the remainder going round in turn).
type generator struct {
	c        *Config
	policy   string
	sidecars []Observer
	rng      *rand.Rand
	zipf     *rand.Zipf
	keys     []string

	bgNext, viralNext, counterNext int
	stats                          TrafficStats
}

func newGenerator(c *Config, sidecars []Observer) *generator {
	rng := rand.New(rand.NewSource(c.Seed))
	keys := make([]string, c.BackgroundKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("bg:%07d", i)
	}
	return &generator{
		c: c, policy: c.PolicyRef(), sidecars: sidecars, rng: rng,
		zipf: rand.NewZipf(rng, c.ZipfS, 1, uint64(c.BackgroundKeys-1)), keys: keys,
	}
}

// owed is how many operations rate per second owes after elapsed.
func owed(rate float64, elapsed time.Duration) uint64 {
	if elapsed <= 0 || rate <= 0 {
		return 0
	}
	return uint64(rate * elapsed.Seconds())
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

// advance sends what is owed after bg of background and hot of hot event.
func (g *generator) advance(bg, hot time.Duration) {
	bgOwed := owed(g.c.BackgroundRate, bg)
	for g.stats.BackgroundReads+g.stats.BackgroundWrites < bgOwed {
		key := g.keys[g.zipf.Uint64()]
		s := g.sidecars[g.bgNext]
		g.bgNext = (g.bgNext + 1) % len(g.sidecars)
		if g.rng.Float64() < g.c.WriteFraction {
			s.Observe(g.policy, key, 0, 1, BackgroundBytes)
			g.stats.BackgroundWrites++
		} else {
			s.Observe(g.policy, key, 1, 0, BackgroundBytes)
			g.stats.BackgroundReads++
		}
		g.stats.Calls++
	}
	n := len(g.sidecars)
	if v := owed(g.c.ViralRate, hot); v > g.stats.ViralReads {
		g.viralNext = spread(v-g.stats.ViralReads, n, g.viralNext, func(i int, k uint64) {
			g.sidecars[i].Observe(g.policy, g.c.ViralKey, clamp32(k), 0, clamp32(k*ViralBytes))
			g.stats.Calls++
		})
		g.stats.ViralReads = v
	}
	if w := owed(g.c.CounterRate, hot); w > g.stats.CounterWrites {
		g.counterNext = spread(w-g.stats.CounterWrites, n, g.counterNext, func(i int, k uint64) {
			g.sidecars[i].Observe(g.policy, g.c.CounterKey, 0, clamp32(k), clamp32(k*CounterBytes))
			g.stats.Calls++
		})
		g.stats.CounterWrites = w
	}
}

func clamp32(v uint64) uint32 { return uint32(min(v, 1<<32-1)) }

// Run offers c's traffic to sidecars (sidecar j of node i at index
// i*c.SidecarsPerNode+j) from start, which is when ready was printed, until
// start + c.Duration (and the rest phase began) or until ctx ends, and calls phase at the start of each
// phase: warm-up (background) at start; the hot event (background, viral key
// and counter) from the first tick at or after start + c.HotStart, for
// c.HotDuration; then rest (nothing) until the end. It paces by the clock:
// each tick sends everything owed since the phase began, so a sender
// descheduled on a loaded machine catches up instead of offering less, and
// the total is bounded by the rates times the durations.
func Run(ctx context.Context, c *Config, sidecars []Observer, start time.Time, phase func(name string, at time.Time)) TrafficStats {
	if len(sidecars) == 0 {
		return TrafficStats{}
	}
	g := newGenerator(c, sidecars)
	phase(PhaseWarmup, start)
	t := time.NewTicker(Tick)
	defer t.Stop()
	var hotStart, restStart time.Time
	prev := start
	for {
		now := time.Now()
		g.stats.MaxGap = max(g.stats.MaxGap, now.Sub(prev))
		prev = now
		if hotStart.IsZero() && now.Sub(start) >= c.HotStart {
			hotStart = now
			phase(PhaseHot, now)
		}
		ending := !hotStart.IsZero() && restStart.IsZero() && now.Sub(hotStart) >= c.HotDuration
		if ending {
			restStart = hotStart.Add(c.HotDuration)
		}
		switch {
		case hotStart.IsZero():
			g.advance(now.Sub(start), 0)
		case restStart.IsZero():
			g.advance(now.Sub(start), now.Sub(hotStart))
		default:
			g.advance(restStart.Sub(start), c.HotDuration)
		}
		if ending {
			phase(PhaseRest, now)
		}
		// The hot event starts up to a tick late, so the run ends once rest
		// has begun and the duration has passed.
		if !restStart.IsZero() && now.Sub(start) >= c.Duration {
			return g.stats
		}
		select {
		case <-ctx.Done():
			return g.stats
		case <-t.C:
		}
	}
}
