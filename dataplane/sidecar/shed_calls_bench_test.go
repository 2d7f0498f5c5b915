package sidecar_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// BenchmarkShedCallShare measures what bounds the other keys' tail while
// a hot key is shed at its budget, without a sidecar: the shard itself.
// The hot key's SUNIONSTORE (BenchmarkShed's, a set of 3,000 members) is
// sent straight to a real redis-server at a fixed rate, paced from a
// start time, by 8 clients, while 20 readers of 20 other keys (one GET
// every 5 ms each) time their replies. A GET that arrives during a call
// waits for the rest of it, so the readers' p99 follows the share of the
// server's time the key holds, whoever admits its calls. Rows: the readers
// alone (rest), then the key at each of shedCallRates, interleaved over 3
// rounds; each row reports its p99 ÷ the rest row's of its round, the
// server's µs per call (INFO commandstats, reset per row) and the share
// of the server's time the calls took, so a criterion that cuts the key
// while the other keys wait over k × their rest can be judged by what it
// would admit. The load average is reported with each row.
func BenchmarkShedCallShare(b *testing.B) {
	if testing.Short() {
		b.Skip("needs redis-server; skipped with -short")
	}
	const (
		srcMembers = 3000
		readers    = 20
		writers    = 8
		row        = 3 * time.Second
	)
	ctx := context.Background()
	srv := redistest.Standalone(b)
	adm := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer adm.Close()
	for i := 0; i < srcMembers; i += 500 {
		m := make([]any, 0, 500)
		for j := i; j < i+500; j++ {
			m = append(m, fmt.Sprintf("member:%06d", j))
		}
		if err := adm.SAdd(ctx, "src:set", m...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	rcs := make([]*redis.Client, readers)
	for i := range rcs {
		rcs[i] = redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
		defer rcs[i].Close()
		adm.Set(ctx, fmt.Sprintf("other:%d", i), "v", 0)
	}
	wc := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: writers})
	defer wc.Close()
	// run is one row: the readers' p99 with the key's calls at rate/s.
	run := func(rate float64) (p99 time.Duration, got float64) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		waits := make([][]time.Duration, readers)
		for i, c := range rcs {
			wg.Go(func() {
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					t0 := time.Now()
					if err := c.Get(ctx, fmt.Sprintf("other:%d", i)).Err(); err != nil {
						b.Error(err)
						return
					}
					waits[i] = append(waits[i], time.Since(t0))
				}
			})
		}
		tokens := make(chan struct{}, 64)
		if rate > 0 {
			wg.Go(func() {
				defer close(tokens)
				t0, sent := time.Now(), 0
				for {
					select {
					case <-stop:
						return
					case <-time.After(500 * time.Microsecond):
					}
					for due := int(time.Since(t0).Seconds() * rate); sent < due; sent++ {
						tokens <- struct{}{}
					}
				}
			})
			for range writers {
				wg.Go(func() {
					for range tokens {
						if err := wc.SUnionStore(ctx, "hot:set", "src:set").Err(); err != nil {
							b.Error(err)
						}
					}
				})
			}
		}
		c0, t0 := calls(b, ctx, adm, "sunionstore"), time.Now()
		time.Sleep(row) // the row's length: the load runs for it
		close(stop)
		wg.Wait()
		var all []time.Duration
		for _, w := range waits {
			all = append(all, w...)
		}
		return quantile(all, 0.99), float64(calls(b, ctx, adm, "sunionstore")-c0) / time.Since(t0).Seconds()
	}
	for round := 1; round <= 3; round++ {
		var rest time.Duration
		for _, rate := range shedCallRates {
			if err := adm.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			p99, got := run(rate)
			if rate == 0 {
				rest = p99
			}
			usec := callMicros(b, ctx, adm)
			b.Run(fmt.Sprintf("round-%d/rate-%.0f", round, rate), func(b *testing.B) {
				b.ReportMetric(got, "calls/s")
				b.ReportMetric(usec, "us/call")
				b.ReportMetric(got*usec/1e6, "server-share")
				b.ReportMetric(float64(p99.Microseconds()), "other-p99-us")
				b.ReportMetric(float64(p99)/float64(rest), "p99/rest")
				b.ReportMetric(loadAverage(), "load1")
			})
		}
	}
}

// shedCallRates are BenchmarkShedCallShare's rows, in calls/s: 0 is rest.
var shedCallRates = []float64{0, 8, 30, 125, 250, 500}

// callMicros is INFO commandstats' µs per SUNIONSTORE since its reset.
func callMicros(b *testing.B, ctx context.Context, rdb *redis.Client) float64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_sunionstore:")
	if !ok {
		return 0
	}
	_, v, _ := strings.Cut(rest, "usec_per_call=")
	v, _, _ = strings.Cut(v, ",")
	var f float64
	fmt.Sscan(v, &f)
	return f
}

// loadAverage is the machine's 1-minute load average (0 where unreadable).
func loadAverage() float64 {
	var f float64
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(la), &f)
	}
	return f
}
