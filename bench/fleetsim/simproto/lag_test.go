package simproto

import (
	"sync"
	"testing"
	"time"
)

// TestLagQuantile: quantiles are upper bounds within 10 % of the sample
// and never above the maximum; merging is adding.
func TestLagQuantile(t *testing.T) {
	var l Lag
	if l.Quantile(0.99) != 0 || l.Max() != 0 {
		t.Fatalf("empty: p99 %v max %v, want 0", l.Quantile(0.99), l.Max())
	}
	for range 98 {
		l.Add(2 * time.Millisecond)
	}
	l.Add(300 * time.Millisecond)
	l.Add(-time.Millisecond) // on time
	if got := l.Quantile(0.5); got < 2*time.Millisecond || got > 2200*time.Microsecond {
		t.Errorf("p50 %v, want 2 ms to 2.2 ms", got)
	}
	if got := l.Quantile(0.99); got < 2*time.Millisecond || got > 2200*time.Microsecond {
		t.Errorf("p99 %v, want 2 ms to 2.2 ms (99 of 100 samples at most 2 ms)", got)
	}
	if got := l.Quantile(1); got != 300*time.Millisecond {
		t.Errorf("p100 %v, want the max, 300 ms", got)
	}
	var o Lag
	for range 100 {
		o.Add(time.Second)
	}
	l.Merge(&o)
	if l.Count() != 200 || l.Max() != time.Second {
		t.Errorf("merged: %d samples, max %v; want 200, 1s", l.Count(), l.Max())
	}
	if got := l.Quantile(0.99); got < 900*time.Millisecond || got > time.Second {
		t.Errorf("merged p99 %v, want within 10 %% under 1 s", got)
	}
	if got := l.Stats("x")["x_max_seconds"]; got != 1 {
		t.Errorf("x_max_seconds %g, want 1", got)
	}
}

// TestLagBuckets: every duration falls in a bucket whose bound is at or
// above it and within 10 % of it (from 1 ms).
func TestLagBuckets(t *testing.T) {
	for d := time.Millisecond; d < 100*time.Second; d = d*21/20 + 1 {
		i := lagBucket(d)
		if b := lagBound(i); b < d-time.Nanosecond || float64(b) > 1.1*float64(d)+1 {
			t.Fatalf("%v: bucket %d bound %v, want in [d, 1.1 d]", d, i, b)
		}
	}
}

// TestRunRangeSplit: nodes run as two ranges, from one start, offer the
// same hot traffic as one process would, announce the same phase times
// (start + HotStart, then HotDuration later), and a node held up in one
// range shows in that range's lag.
func TestRunRangeSplit(t *testing.T) {
	c := Defaults()
	c.Nodes, c.SidecarsPerNode = 3, 2
	c.HotStart, c.HotDuration, c.Duration = 150*time.Millisecond, 300*time.Millisecond, time.Second
	start := time.Now()
	ranges := []Range{{First: 0, Count: 1}, {First: 1, Count: 2}}
	recs := make([]*recorder, len(ranges))
	stats := make([]TrafficStats, len(ranges))
	phases := make([]map[string]time.Time, len(ranges))
	var wg sync.WaitGroup
	for k, r := range ranges {
		recs[k], phases[k] = &recorder{}, map[string]time.Time{}
		obs := make([]Observer, r.Count*c.SidecarsPerNode)
		for i := range obs {
			obs[i] = recs[k]
		}
		held := false
		wg.Go(func() {
			var err error
			stats[k], err = RunRange(t.Context(), &c, r, obs, start,
				func(p string, at time.Time) { phases[k][p] = at },
				func(node int) {
					// Node 2 (the second range's second) is held up once,
					// as a starved simulator would be.
					if node == 2 && !held {
						held = true
						time.Sleep(250 * time.Millisecond)
					}
				})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var viral, counter uint64
	for k := range ranges {
		viral += recs[k].keys[c.ViralKey].reads
		counter += recs[k].keys[c.CounterKey].writes
		if got, want := phases[k][PhaseHot], start.Add(c.HotStart); !got.Equal(want) {
			t.Errorf("range %d: hot at %v, want start + HotStart", k, got.Sub(start))
		}
		if got, want := phases[k][PhaseRest], start.Add(c.HotStart+c.HotDuration); !got.Equal(want) {
			t.Errorf("range %d: rest at %v, want start + HotStart + HotDuration", k, got.Sub(start))
		}
	}
	if want := owed(c.ViralRate, c.HotDuration); viral != want {
		t.Errorf("viral reads over both ranges %d, want %d", viral, want)
	}
	if want := owed(c.CounterRate, c.HotDuration); counter != want {
		t.Errorf("counter writes over both ranges %d, want %d", counter, want)
	}
	if got := stats[1].Lag.Max(); got < 100*time.Millisecond {
		t.Errorf("range with the held node: lag max %v (%d samples, max gap %v), want over 100 ms", got, stats[1].Lag.Count(), stats[1].MaxGap)
	}
	if _, err := RunRange(t.Context(), &c, Range{First: 2, Count: 2}, make([]Observer, 4), start, func(string, time.Time) {}, nil); err == nil {
		t.Error("a range past the fleet's last node: no error")
	}
}
