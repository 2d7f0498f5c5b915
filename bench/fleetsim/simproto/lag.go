package simproto

import (
	"math"
	"sync"
	"time"
)

// Lag is a histogram of how late a simulator's periodic work ran: each
// sample is how much longer than its interval a loop took between two runs
// (0 when on time). A node simulator that cannot keep up with real time on
// its machine shows it here, so its row says its times are late by that
// much, not heatsink's. Buckets grow by 10 % from 1 ms (p99 is read to within
// 10 %), so a simulated node keeps a kilobyte, and histograms of many nodes
// or processes merge exactly.
type Lag struct {
	counts [lagBuckets]uint64
	n      uint64
	max    time.Duration
}

const (
	lagBuckets = 140 // 1 ms × 1.1^138 ≈ 530 s; beyond is the last bucket
	lagGrowth  = 1.1
)

// lagBucket is d's bucket: 0 below 1 ms, then i with upper bound
// 1 ms × 1.1^(i-1).
func lagBucket(d time.Duration) int {
	if d < time.Millisecond {
		return 0
	}
	i := 1 + int(math.Ceil(math.Log(float64(d)/float64(time.Millisecond))/math.Log(lagGrowth)))
	return min(i, lagBuckets-1)
}

// lagBound is bucket i's upper bound.
func lagBound(i int) time.Duration {
	if i == 0 {
		return time.Millisecond
	}
	return time.Duration(float64(time.Millisecond) * math.Pow(lagGrowth, float64(i-1)))
}

// Add records one sample (negative counts as 0).
func (l *Lag) Add(d time.Duration) {
	d = max(d, 0)
	l.counts[lagBucket(d)]++
	l.n++
	l.max = max(l.max, d)
}

// Merge adds o's samples to l.
func (l *Lag) Merge(o *Lag) {
	for i, c := range o.counts {
		l.counts[i] += c
	}
	l.n += o.n
	l.max = max(l.max, o.max)
}

// Count is the number of samples.
func (l *Lag) Count() uint64 { return l.n }

// Max is the largest sample, exactly.
func (l *Lag) Max() time.Duration { return l.max }

// Quantile is an upper bound of the q-quantile (0 < q ≤ 1): the upper
// bound of the bucket holding it, never above Max; 0 without samples.
func (l *Lag) Quantile(q float64) time.Duration {
	if l.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(l.n)))
	var seen uint64
	for i, c := range l.counts {
		seen += c
		if seen >= max(rank, 1) {
			return min(lagBound(i), l.max)
		}
	}
	return l.max
}

// Stats are l as a done or progress event's counters, named prefix_p50_seconds,
// prefix_p99_seconds, prefix_max_seconds and prefix_samples.
func (l *Lag) Stats(prefix string) map[string]float64 {
	return map[string]float64{
		prefix + "_p50_seconds": l.Quantile(0.5).Seconds(), prefix + "_p99_seconds": l.Quantile(0.99).Seconds(),
		prefix + "_max_seconds": l.max.Seconds(), prefix + "_samples": float64(l.n),
	}
}

// LagProbe measures how late a process's timers fire: a ticker every
// interval records how much longer than interval each wait took. It
// measures the process's scheduling delay (its goroutines waiting for a
// core), for a part of a simulator that has no clock of its own (e.g. one
// that only reacts to what it receives).
type LagProbe struct {
	mu  sync.Mutex
	lag Lag
}

// Run samples every interval until done is closed.
func (p *LagProbe) Run(done <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	prev := time.Now()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		now := time.Now()
		p.mu.Lock()
		p.lag.Add(now.Sub(prev) - interval)
		p.mu.Unlock()
		prev = now
	}
}

// Reset forgets the samples so far (e.g. those of a start-up).
func (p *LagProbe) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lag = Lag{}
}

// Stats is the probe's Lag.Stats so far.
func (p *LagProbe) Stats(prefix string) map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lag.Stats(prefix)
}
