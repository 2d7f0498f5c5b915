package redishook_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/readload"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// BenchmarkRefreshAhead is dataplane/sidecar's BenchmarkRefreshAhead in
// process: the same 50 readers at depth 1 (one GET every 2 ms each) over 100
// expiries of a 100 ms TTL, through one go-redis client with the hook (a
// cache hit costs no network, so an expiry's round trip stands out), with
// refresh off, at 10 % and at 50 % (the ceilings of the measured window),
// and at the policy's defaults (refreshAheadPercent 10, jitterPercent 10),
// next to a key that never expires.
// hack/bench.d/36-refresh-ahead.sh prints both benchmarks' rows.
func BenchmarkRefreshAhead(b *testing.B) {
	if testing.Short() {
		b.Skip("needs redis-server; skipped with -short")
	}
	const (
		clients = 50
		ttl     = 100 * time.Millisecond
		periods = 100
		pace    = 2 * time.Millisecond
	)
	srv := redistest.Standalone(b)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	for _, row := range []struct {
		name            string
		ttl             time.Duration
		percent, jitter int32
	}{{"no-expiry", time.Hour, 0, 0}, {"refresh-off", ttl, 0, 0}, {"refresh-10", ttl, 10, 0}, {"refresh-50", ttl, 50, 0}, {"refresh-10-jitter-10", ttl, 10, 10}} {
		b.Run(row.name, func(b *testing.B) {
			key := "hot:" + row.name
			if err := direct.Set(ctx, key, strings.Repeat("v", 100), 0).Err(); err != nil {
				b.Fatal(err)
			}
			app := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: clients})
			defer app.Close()
			reg := prometheus.NewRegistry()
			e := engine.New(app, engine.Options{Registerer: reg})
			defer e.Close()
			app.AddHook(redishook.New(e))
			e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: []routing.Entry{
				{Key: key, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: row.ttl.Milliseconds(), RefreshAheadPercent: row.percent, JitterPercent: row.jitter}}}})
			if err := app.Get(ctx, key).Err(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := direct.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				misses0, refreshes0 := readload.Counter(b, reg, "heatsink_engine_cache_misses_total"), readload.Counter(b, reg, "heatsink_engine_cache_refreshes_total")
				res, err := readload.Run(clients, pace, ttl, periods, func(int) error { return app.Get(ctx, key).Err() })
				if err != nil {
					b.Fatal(err)
				}
				gets := getCalls(b, direct)
				res.Report(b)
				b.ReportMetric(float64(gets)/periods, "upstream-GETs/TTL")
				b.ReportMetric((readload.Counter(b, reg, "heatsink_engine_cache_misses_total")-misses0)/periods, "waited/TTL")
				b.ReportMetric((readload.Counter(b, reg, "heatsink_engine_cache_refreshes_total")-refreshes0)/periods, "refreshes/TTL")
			}
		})
	}
}

// getCalls is the GET calls count in c's INFO commandstats.
func getCalls(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_get:calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}
