package sidecar_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
// shard) at its real ceiling: the hot key is written by SUNIONSTORE
// hot:set <a set of srcMembers members>, which costs the server about
// 1 ms of its one main thread a call, so the shard saturates at about a
// thousand of them a second, as a real shard does at its capacity (an
// INCR costs it about 1 µs: at the rates a 2-core load generator can
// offer, the shard never saturates, and the other keys' tail measures the
// machine's CPU, not the shard). The capacity is learned in the run, as
// the manager learns it (controllers/capacity): the calls per CPU-second of
// the server over a second of the same command from 4 direct clients; the
// policy declares it (capacity.perShardWritesPerSecond), split not allowed,
// mitigations.shed with its defaults (budget 80 % of it). 40 writers at
// depth 1 ask 5 × the capacity (70 % of them through sidecar A, 30 %
// through B), while 20 readers of 20 other keys of the same server (one GET
// every 5 ms each, through A) measure their latency. The load is kept
// small (about 5,000 writes and 4,000 reads asked a second) so that the
// load generator does not take the machine's cores from the shard. Side
// by side in one run, the rows interleaved over shedRounds rounds (the
// machine is shared: a drift of its load shows in every row alike):
//
//   - rest: the readers alone (the peer of their latency);
//   - budget: the writers ask only the budget, nothing shed: what the
//     readers see when the shard takes exactly what shedding admits;
//   - unshed: the writers ask 5 × the capacity, nothing shed (today
//     without shed): the shard saturates;
//   - shed: the same, shed. The tables are the manager's (decide.Decide)
//     for the attempts the bench measured over the last second,
//     republished every second as the manager would, so the published
//     demand follows the real one;
//   - shed-50: the same with shed.budgetPercent 50.
//
// Reported: the hot key's writes that reached Redis over the measured 5 s
// (INFO commandstats, exact), and as a ratio to the budget; the attempts/s
// offered; the readers' p50/p99/p99.9 (µs); the writers' p50 and p99 of
// admitted and of refused writes; and where the machine's CPU went over
// the measured window, in cores: this process (the clients, both sidecars
// and their engines), redis-server (INFO cpu), and the rest of the machine
// (/proc/stat minus both: other work). hack/bench.d/38-shed.sh prints them.
func BenchmarkShed(b *testing.B) {
	if testing.Short() {
		b.Skip("needs redis-server; skipped with -short")
	}
	const (
		srcMembers = 3000
		writers    = 40
		readers    = 20
		pace       = 5 * time.Millisecond // the readers'; the writers' follows the capacity
		warm       = 2 * time.Second
		measure    = 5 * time.Second
		hot        = "hot:set"
		src        = "src:set"
	)
	srv := redistest.Standalone(b)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	members := make([]any, srcMembers)
	for i := range members {
		members[i] = fmt.Sprintf("member:%d", i)
	}
	if err := direct.SAdd(ctx, src, members...).Err(); err != nil {
		b.Fatal(err)
	}
	capacity := learnCapacity(b, ctx, srv.Addr, direct, hot, src)
	policy := func(pct int32) (*v1alpha1.HotKeyPolicySpec, int64) {
		spec := &v1alpha1.HotKeyPolicySpec{}
		spec.Capacity.PerShardWritesPerSecond = capacity
		spec.Mitigations.Split.Enabled = ptr.To(false)
		spec.Mitigations.Shed.Enabled = ptr.To(true)
		spec.Mitigations.Shed.BudgetPercent = pct
		spec.Thresholds.SustainFor.Duration = time.Millisecond
		// Hot at a tenth of the capacity (the default, 1,000 writes/s, is
		// about this shard's whole capacity: a key at its ceiling would
		// not even be hot).
		spec.Thresholds.WritesPerSecond = max(capacity/10, 1)
		v1alpha1.SetDefaults(spec)
		pr, pw := v1alpha1.PerKeyCapacity(spec, nil)
		_, budget := decide.ShedBudgets(spec, pr, pw, 0, 0)
		return spec, budget
	}
	_, defaultBudget := policy(0)
	b.Logf("learned capacity %d SUNIONSTORE/s, default budget %d/s", capacity, defaultBudget)

	for round := range shedRounds {
		for _, row := range []string{"rest", "budget", "unshed", "shed", "shed-50"} {
			spec, budget := policy(0)
			if row == "shed-50" {
				spec, budget = policy(50)
			}
			b.Run(fmt.Sprintf("%s/round-%d", row, round+1), func(b *testing.B) {
				var engs [2]*engine.Engine
				var addrs [2]string
				for i := range engs {
					ec := redis.NewClient(&redis.Options{Addr: srv.Addr})
					defer ec.Close()
					engs[i] = engine.New(ec, engine.Options{})
					defer engs[i].Close()
					addrs[i], _ = proxytest.Start(b, proxy.Config{Upstreams: []string{srv.Addr}, Engine: engs[i]})
				}
				// writers × 1/wpace is what they ask: 5 × the capacity, or the budget.
				wpace := time.Duration(int64(time.Second) * writers / (5 * capacity))
				if row == "budget" {
					wpace = time.Duration(int64(time.Second) * writers / budget)
				}
				for b.Loop() {
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
							c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
							defer c.Close()
							wg.Go(func() {
								var ok, shed []time.Duration
								next := time.Now().Add(time.Duration(w) * wpace / writers)
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
									next = next.Add(wpace)
									t0 := time.Now()
									err := c.SUnionStore(ctx, hot, src).Err()
									d := time.Since(t0)
									attempts.Add(1)
									if !measuring.Load() {
										continue
									}
									switch {
									case err == nil:
										ok = append(ok, d)
									case err.Error() == routing.ShedError:
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
							out := decide.Decide(decide.Input{Now: now, Spec: spec, Observations: map[string]decide.Observation{hot: {WritesPerSecond: rate}}, State: state, Current: cur, Margin: time.Second})
							state, now = out.State, now.Add(time.Millisecond)
							version++
							cur = &routing.Table{SchemaVersion: 1, Version: version, EpochMillis: 60000, Entries: out.Entries}
						}
						for _, e := range engs {
							e.SetTable(cur)
						}
					}
					if strings.HasPrefix(row, "shed") {
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
					v0 := calls(b, ctx, direct, "sunionstore")
					a0 := attempts.Load()
					cpu0 := readCPU(b, ctx, direct)
					measuring.Store(true)
					t0 := time.Now()
					res, err := readload.Run(readers, pace, measure, 1, func(i int) error {
						return rc[i].Get(ctx, fmt.Sprintf("other:%d", i)).Err()
					})
					el := time.Since(t0)
					cpu1 := readCPU(b, ctx, direct)
					v1 := calls(b, ctx, direct, "sunionstore")
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
					proc, rds, machine := cpu1.proc-cpu0.proc, cpu1.redis-cpu0.redis, cpu1.machine-cpu0.machine
					b.ReportMetric(proc/el.Seconds(), "proc-cores")
					b.ReportMetric(rds/el.Seconds(), "redis-cores")
					b.ReportMetric(max(machine-proc-rds, 0)/el.Seconds(), "others-cores")
					if row != "rest" {
						b.ReportMetric(float64(capacity), "capacity/s")
						b.ReportMetric(float64(budget), "budget/s")
						admitted := float64(v1-v0) / el.Seconds()
						b.ReportMetric(admitted, "key-writes/s")
						b.ReportMetric(admitted/float64(budget), "key/budget")
						b.ReportMetric(float64(a1-a0)/el.Seconds(), "offered/s")
						b.ReportMetric(float64(a1-a0)/el.Seconds()/float64(capacity), "offered/capacity")
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
}

// learnCapacity is the shard's capacity for SUNIONSTORE hot src: 4 direct
// clients run it for a second, and the server's calls per CPU-second of
// it are what one full core serves (the estimate controllers/capacity
// makes from the same INFO numbers).
func learnCapacity(b *testing.B, ctx context.Context, addr string, direct *redis.Client, hot, src string) int64 {
	c0, t0 := calls(b, ctx, direct, "sunionstore"), readCPU(b, ctx, direct)
	var wg sync.WaitGroup
	end := time.Now().Add(time.Second)
	for range 4 {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		defer c.Close()
		wg.Go(func() {
			for i := 0; i < 100_000 && time.Now().Before(end); i++ {
				if err := c.SUnionStore(ctx, hot, src).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n, cpu := calls(b, ctx, direct, "sunionstore")-c0, readCPU(b, ctx, direct).redis-t0.redis
	if n <= 0 || cpu <= 0 {
		b.Fatalf("calibration: %d calls in %.3f CPU-s", n, cpu)
	}
	return int64(float64(n) / cpu)
}

// calls is INFO commandstats' count of cmd (lower case) so far.
func calls(b *testing.B, ctx context.Context, rdb *redis.Client, cmd string) int64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_"+cmd+":calls=")
	if !ok {
		return 0
	}
	n, _, _ := strings.Cut(rest, ",")
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// shedRounds is how many times BenchmarkShed runs its rows, interleaved.
const shedRounds = 2

// cpuTimes are cumulative CPU-seconds: this process's (getrusage), the
// redis-server's (INFO cpu) and the whole machine's busy time
// (/proc/stat; 0 where unreadable).
type cpuTimes struct{ proc, redis, machine float64 }

func readCPU(b *testing.B, ctx context.Context, rdb *redis.Client) cpuTimes {
	var t cpuTimes
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	tv := func(v syscall.Timeval) float64 { return float64(v.Sec) + float64(v.Usec)/1e6 }
	t.proc = tv(ru.Utime) + tv(ru.Stime)
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			t.redis += f
		}
	}
	// /proc/stat's first line: cpu user nice system idle iowait irq
	// softirq steal ..., in USER_HZ (100 on Linux).
	if st, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(st), "\n")
		for i, f := range strings.Fields(line)[1:] {
			if i == 3 || i == 4 || i >= 8 { // idle, iowait, guest (counted in user)
				continue
			}
			n, _ := strconv.ParseFloat(f, 64)
			t.machine += n / 100
		}
	}
	return t
}

func quantile(d []time.Duration, f float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(f*float64(len(d))))]
}
