package sidecar_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/readload"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// BenchmarkRefreshAhead measures what a cached hot key's expiries cost its
// readers, through one sidecar in front of a real redis-server: 50 clients
// at depth 1 (one connection each, one GET every 2 ms each) read one key for
// 100 TTLs of 100 ms (jitter 0 but in the last row, so 100 expiries), side
// by side in one run:
//
//   - no-expiry: a TTL of 1 h, every read a cache hit (the peer);
//   - refresh-off: refreshAheadPercent 0, the key expires under its readers;
//   - refresh-10: refreshAheadPercent 10 (the default): the key's measured
//     window, at most 10 ms;
//   - refresh-50: refreshAheadPercent 50: at most 50 ms;
//   - refresh-10-jitter-10: the policy's defaults, refreshAheadPercent 10
//     and jitterPercent 10 (a miss's fill lives 90 to 100 ms).
//
// Reported per row: client GET latency p50, p99, p99.9 and max; the median
// over the 100 TTL periods of each period's slowest read (an expiry shows
// there as one upstream round trip); upstream GETs per TTL (INFO
// commandstats of the server, which only this sidecar reads); per TTL, the
// reads that found no fresh cached value and waited for Redis (the
// sidecar's heatsink_engine_cache_misses_total: exact, where the latencies
// of a shared machine are noisy) and the early refreshes started. hack/bench.d/
// 36-refresh-ahead.sh prints them as a table.
func BenchmarkRefreshAhead(b *testing.B) {
	if testing.Short() {
		b.Skip("needs redis-server; skipped with -short")
	}
	const (
		clients = 50
		ttl     = 100 * time.Millisecond
		periods = 100
		// pace is each client's interval between GETs: 25,000 GET/s in
		// all, well under what the sidecar serves on the bench machine.
		pace = 2 * time.Millisecond
	)
	srv := redistest.Standalone(b)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	for _, row := range []struct {
		name            string
		ttl             time.Duration
		percent, jitter int
	}{{"no-expiry", time.Hour, 0, 0}, {"refresh-off", ttl, 0, 0}, {"refresh-10", ttl, 10, 0}, {"refresh-50", ttl, 50, 0}, {"refresh-10-jitter-10", ttl, 10, 10}} {
		b.Run(row.name, func(b *testing.B) {
			key := "hot:" + row.name
			reg := prometheus.NewRegistry()
			addr := runSidecar(b, srv.Addr, fmt.Sprintf(`{"schemaVersion":1,"policy":"ns/p","version":1,"epochMillis":60000,"entries":[`+
				`{"key":%q,"source":"detected","coalesce":true,"localCache":{"ttlMillis":%d,"refreshAheadPercent":%d,"jitterPercent":%d}}]}`, key, row.ttl.Milliseconds(), row.percent, row.jitter),
				func(c *sidecar.Config) { c.Registry = reg })
			cs := make([]*redis.Client, clients)
			for i := range cs {
				cs[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MinIdleConns: 1})
				defer cs[i].Close()
			}
			value := strings.Repeat("v", 100)
			eventually.True(b, 10*time.Second, "the routing table applies", func() bool {
				direct.Set(ctx, key, value, 0)
				cs[0].Get(ctx, key)
				direct.Set(ctx, key, "behind", 0)
				defer direct.Set(ctx, key, value, 0)
				return cs[0].Get(ctx, key).Val() != "behind"
			})
			for b.Loop() {
				if err := direct.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				misses0, refreshes0 := readload.Counter(b, reg, "heatsink_engine_cache_misses_total"), readload.Counter(b, reg, "heatsink_engine_cache_refreshes_total")
				res, err := readload.Run(clients, pace, ttl, periods, func(i int) error { return cs[i].Get(ctx, key).Err() })
				if err != nil {
					b.Fatal(err)
				}
				gets := infoCalls(b, direct, "get")
				misses := readload.Counter(b, reg, "heatsink_engine_cache_misses_total") - misses0
				refreshes := readload.Counter(b, reg, "heatsink_engine_cache_refreshes_total") - refreshes0
				res.Report(b)
				b.ReportMetric(float64(gets)/periods, "upstream-GETs/TTL")
				b.ReportMetric(misses/periods, "waited/TTL")
				b.ReportMetric(refreshes/periods, "refreshes/TTL")
			}
		})
	}
}

// infoCalls is the calls count of cmd (lower case) in INFO commandstats.
func infoCalls(t testing.TB, c *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}
