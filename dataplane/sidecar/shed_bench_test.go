package sidecar_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/proxytest"
	"github.com/heatsink-dev/heatsink/internal/testing/readload"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// BenchmarkShed measures shedding at the key with real redis-server (the
// shard): a write-hot counter offered 5 × the shard's declared capacity
// (capacity.perShardWritesPerSecond 3,200, split not allowed) by 40 writers
// at depth 1 (one INCR every 2 ms each: 20,000/s asked, 6 × the capacity; what the
// machine achieves is reported as offered/s and offered÷capacity), 70 % of them through
// sidecar A and 30 % through sidecar B, while 20 readers of 20 other keys
// of the same server (one GET every 2 ms each, through A) measure their
// latency. Side by side in one run:
//
//   - rest: the readers alone (the peer of their latency);
//   - unshed: the hot counter as well, nothing shed (today without shed);
//   - shed: the same, mitigations.shed on with its defaults (budget 80 %
//     of the capacity: 2,560 INCR/s). The tables are the manager's
//     (decide.Decide) for the attempts the bench measured over the last
//     second, republished every second as the manager would, so the
//     published demand follows the real one.
//
// Reported: the counter's INCR/s that reached Redis over the measured 5 s
// (the counter's own value, exact), and as a ratio to the budget; the
// attempts/s offered; the readers' p50/p99/p99.9 (µs); the writers' p50 and
// p99 of admitted and of refused INCRs. hack/bench.d/38-shed.sh prints them.
func BenchmarkShed(b *testing.B) {
	if testing.Short() {
		b.Skip("needs redis-server; skipped with -short")
	}
	const (
		capacity = 3200
		writers  = 40
		readers  = 20
		pace     = 2 * time.Millisecond
		warm     = 2 * time.Second
		measure  = 5 * time.Second
		counter  = "likes:post:42"
	)
	srv := redistest.Standalone(b)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	spec := &v1alpha1.HotKeyPolicySpec{}
	spec.Capacity.PerShardWritesPerSecond = capacity
	spec.Mitigations.Split.Enabled = ptr.To(false)
	spec.Mitigations.Shed.Enabled = ptr.To(true)
	spec.Thresholds.SustainFor.Duration = time.Millisecond
	v1alpha1.SetDefaults(spec)
	_, budget := decide.ShedBudgets(spec, v1alpha1.FallbackPerShardReads, v1alpha1.FallbackPerShardWrites, 0, 0)

	for _, row := range []string{"rest", "unshed", "shed"} {
		b.Run(row, func(b *testing.B) {
			var engs [2]*engine.Engine
			var addrs [2]string
			for i := range engs {
				ec := redis.NewClient(&redis.Options{Addr: srv.Addr})
				defer ec.Close()
				engs[i] = engine.New(ec, engine.Options{})
				defer engs[i].Close()
				addrs[i], _ = proxytest.Start(b, proxy.Config{Upstreams: []string{srv.Addr}, Engine: engs[i]})
			}
			for b.Loop() {
				direct.Set(ctx, counter, 0, 0)
				var attempts atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var mu sync.Mutex
				var okLat, shedLat []time.Duration
				measuring := atomic.Bool{}
				if row != "rest" {
					for w := range writers {
						addr := addrs[0]
						if w >= writers*7/10 {
							addr = addrs[1]
						}
						c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
						defer c.Close()
						wg.Go(func() {
							var ok, shed []time.Duration
							next := time.Now().Add(time.Duration(w) * pace / writers)
							for range 1_000_000 {
								select {
								case <-stop:
									mu.Lock()
									okLat, shedLat = append(okLat, ok...), append(shedLat, shed...)
									mu.Unlock()
									return
								default:
								}
								if d := time.Until(next); d > 0 {
									time.Sleep(d)
								}
								next = next.Add(pace)
								t0 := time.Now()
								err := c.Incr(ctx, counter).Err()
								d := time.Since(t0)
								attempts.Add(1)
								if !measuring.Load() {
									continue
								}
								switch {
								case err == nil:
									ok = append(ok, d)
								case redis.IsTryAgainError(err):
									shed = append(shed, d)
								}
							}
						})
					}
				}
				// The manager's loop: every second, decide on the attempts
				// measured over it and publish the table to both sidecars.
				var state decide.State
				var cur *routing.Table
				version := int64(0)
				publish := func(now time.Time, rate int64) {
					for range 2 { // sustainFor (1 ms) over: hot
						out := decide.Decide(decide.Input{Now: now, Spec: spec, Observations: map[string]decide.Observation{counter: {WritesPerSecond: rate}}, State: state, Current: cur, Margin: time.Second})
						state, now = out.State, now.Add(time.Millisecond)
						version++
						cur = &routing.Table{SchemaVersion: 1, Version: version, EpochMillis: 60000, Entries: out.Entries}
					}
					for _, e := range engs {
						e.SetTable(cur)
					}
				}
				if row == "shed" {
					wg.Go(func() {
						last := attempts.Load()
						tick := time.NewTicker(time.Second)
						defer tick.Stop()
						for range 60 {
							select {
							case <-stop:
								return
							case now := <-tick.C:
								n := attempts.Load()
								publish(now, n-last)
								last = n
							}
						}
					})
				}
				rc := make([]*redis.Client, readers)
				for i := range rc {
					rc[i] = redis.NewClient(&redis.Options{Addr: addrs[0], PoolSize: 1, MinIdleConns: 1})
					defer rc[i].Close()
					rc[i].Set(ctx, fmt.Sprintf("other:%d", i), "value", 0)
				}
				time.Sleep(warm)
				v0, _ := direct.Get(ctx, counter).Int64()
				a0 := attempts.Load()
				measuring.Store(true)
				t0 := time.Now()
				res, err := readload.Run(readers, pace, measure, 1, func(i int) error {
					return rc[i].Get(ctx, fmt.Sprintf("other:%d", i)).Err()
				})
				el := time.Since(t0)
				v1, _ := direct.Get(ctx, counter).Int64()
				a1 := attempts.Load()
				close(stop)
				wg.Wait()
				if err != nil {
					b.Fatal(err)
				}
				us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
				b.ReportMetric(us(res.P50), "p50-us")
				b.ReportMetric(us(res.P99), "p99-us")
				b.ReportMetric(us(res.P999), "p99.9-us")
				if row != "rest" {
					admitted := float64(v1-v0) / el.Seconds()
					b.ReportMetric(admitted, "key-INCR/s")
					b.ReportMetric(admitted/float64(budget), "key/budget")
					b.ReportMetric(float64(a1-a0)/el.Seconds(), "offered/s")
					b.ReportMetric(float64(a1-a0)/el.Seconds()/capacity, "offered/capacity")
					b.ReportMetric(us(quantile(okLat, 0.5)), "admitted-p50-us")
					b.ReportMetric(us(quantile(okLat, 0.99)), "admitted-p99-us")
					b.ReportMetric(us(quantile(shedLat, 0.5)), "refused-p50-us")
					b.ReportMetric(us(quantile(shedLat, 0.99)), "refused-p99-us")
					b.ReportMetric(float64(len(shedLat))/float64(max(len(shedLat)+len(okLat), 1)), "refused-fraction")
				}
			}
		})
	}
}

func quantile(d []time.Duration, f float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(f*float64(len(d))))]
}
