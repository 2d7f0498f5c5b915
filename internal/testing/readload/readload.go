// Package readload runs the paced read load of the refresh-ahead
// benchmarks (dataplane/sidecar and dataplane/redishook
// BenchmarkRefreshAhead): n readers at depth 1 over a number of TTL periods,
// and the latency figures they report. One implementation, so the sidecar's
// and the hook's rows are measured alike.
package readload

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Result is what one load measured.
type Result struct {
	Reads int
	// Quantiles of every read's latency.
	P50, P99, P999, Max time.Duration
	// PeriodMaxP50 is the median over the periods of each period's slowest
	// read: an expiry under the readers shows there as a round trip.
	PeriodMaxP50 time.Duration
}

// Run calls read(i) from n goroutines i, each once every pace (the
// goroutines staggered over pace), for periods periods of period each, and
// measures each call. Pacing keeps the latency the path's, not a queue
// behind a saturated CPU; each goroutine stops after a million calls at the
// latest. The first error stops Run.
func Run(n int, pace, period time.Duration, periods int, read func(i int) error) (Result, error) {
	type sample struct{ at, d time.Duration }
	start := time.Now()
	end := start.Add(time.Duration(periods) * period)
	all := make([][]sample, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s := make([]sample, 0, 1<<14)
			next := start.Add(time.Duration(i) * pace / time.Duration(n))
			for range 1_000_000 {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				next = next.Add(pace)
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				if err := read(i); err != nil {
					errs[i] = err
					return
				}
				s = append(s, sample{t0.Sub(start), time.Since(t0)})
			}
			all[i] = s
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Result{}, err
		}
	}
	var lat []time.Duration
	worst := make([]time.Duration, periods)
	for _, s := range all {
		for _, x := range s {
			lat = append(lat, x.d)
			if p := int(x.at / period); p < periods && x.d > worst[p] {
				worst[p] = x.d
			}
		}
	}
	if len(lat) == 0 {
		return Result{}, nil
	}
	slices.Sort(lat)
	slices.Sort(worst)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	return Result{Reads: len(lat), P50: q(0.5), P99: q(0.99), P999: q(0.999), Max: lat[len(lat)-1], PeriodMaxP50: worst[periods/2]}, nil
}

// Report reports r as b's metrics, latencies in µs.
func (r Result) Report(b *testing.B) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(r.P50), "p50-us")
	b.ReportMetric(us(r.P99), "p99-us")
	b.ReportMetric(us(r.P999), "p99.9-us")
	b.ReportMetric(us(r.Max), "max-us")
	b.ReportMetric(us(r.PeriodMaxP50), "period-max-p50-us")
	b.ReportMetric(float64(r.Reads), "reads")
}

// Counter is the value of the unlabelled counter name in reg (an engine's
// heatsink_engine_*_total).
func Counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
