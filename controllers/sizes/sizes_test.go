package sizes

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// TestBucketBound: taking every token offered every 100 ms for 100 s (an
// injected clock) grants PerInterval × (1 + 100 s ÷ Interval), never more;
// Next says when the next token is there.
func TestBucketBound(t *testing.T) {
	o := Options{PerInterval: 4, Interval: 10 * time.Second}.WithDefaults()
	var b Bucket
	if got := b.Take(t0, 10, o); got != 4 {
		t.Fatalf("a new bucket granted %d, want its burst 4", got)
	}
	if got := b.Take(t0, 1, o); got != 0 {
		t.Fatalf("an empty bucket granted %d", got)
	}
	if next := b.Next(t0, 1, o); next != t0.Add(2500*time.Millisecond) {
		t.Fatalf("next token at %v, want +2.5s", next.Sub(t0))
	}
	if next := b.Next(t0, 10, o); next != t0.Add(10*time.Second) {
		t.Fatalf("next full batch (at most the burst) at %v, want +10s", next.Sub(t0))
	}
	total := 4
	for now := t0; now.Before(t0.Add(100 * time.Second)); now = now.Add(100 * time.Millisecond) {
		total += b.Take(now, 100, o)
	}
	// 40 refilled over 100 s (the last tenth of a token not yet whole).
	if bound := 4 * (1 + 100/10); total > bound || total < bound-1 {
		t.Fatalf("granted %d over 100 s, want %d (−1 at most)", total, bound)
	}
	// Idle for an hour: the burst again, not an hour's worth.
	if got := b.Take(t0.Add(time.Hour), 1000, o); got != 4 {
		t.Fatalf("after an idle hour granted %d, want 4", got)
	}
}

func TestDueFreshExpire(t *testing.T) {
	ttl := 5 * time.Minute
	res := map[string]Result{
		"a": {Bytes: 10, At: t0},
		"b": {Missing: true, At: t0.Add(-ttl)}, // stale
	}
	if d := cmp.Diff([]string{"b", "c"}, Due([]string{"a", "b", "c", "d"}, res, t0, ttl, 2)); d != "" {
		t.Fatalf("due (-want +got):\n%s", d)
	}
	if r, ok := Fresh(res, "a", t0.Add(ttl-time.Second), ttl); !ok || r.Bytes != 10 {
		t.Fatalf("a fresh answer was not: %+v %v", r, ok)
	}
	if _, ok := Fresh(res, "a", t0.Add(ttl), ttl); ok {
		t.Fatal("an answer as old as the TTL is still fresh")
	}
	Expire(res, t0, ttl)
	if _, ok := res["b"]; ok || len(res) != 1 {
		t.Fatalf("after Expire: %+v", res)
	}
}

// memoryCalls reads how many MEMORY USAGE a real server ran (INFO
// commandstats).
func memoryCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_memory\|usage:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestMeasureRealRedis: against a real redis-server, a 5 MB hash (5,000
// fields of 1,000 bytes; one HGET reads 1,000 bytes of it) and a 20 MiB
// string are measured within a sane factor of their payload, a missing key
// is Missing, one call a key; a user without +memory|usage gets an error
// naming the command, and the answers before it.
func TestMeasureRealRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	srv := redistest.Standalone(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	const fields, fieldBytes, strBytes = 5000, 1000, 20 << 20
	args := make([]any, 0, 2*fields)
	for i := 0; i < fields; i++ {
		args = append(args, fmt.Sprintf("f%d", i), strings.Repeat("h", fieldBytes))
	}
	if err := c.HSet(ctx, "big:hash", args...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "big:str", strings.Repeat("s", strBytes), 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := Measure(ctx, c, []string{"big:hash", "big:str", "gone"}, DefaultSamples, t0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MEMORY USAGE: big:hash %d bytes (payload %d), big:str %d bytes (payload %d)", got["big:hash"].Bytes, fields*fieldBytes, got["big:str"].Bytes, strBytes)
	within := func(key string, truth int64) {
		if b := got[key].Bytes; b < truth || float64(b) > 1.5*float64(truth) {
			t.Errorf("%s measured %d bytes, want within [1, 1.5] × its payload %d", key, b, truth)
		}
	}
	within("big:hash", fields*fieldBytes)
	within("big:str", strBytes)
	if g := got["gone"]; !g.Missing || g.Bytes != 0 || !g.At.Equal(t0) {
		t.Errorf("a missing key: %+v", g)
	}
	if n := memoryCalls(t, c); n != 3 {
		t.Errorf("redis ran %d MEMORY USAGE, want 3 (one a key)", n)
	}

	if err := c.Do(ctx, "ACL", "SETUSER", "nomem", "reset", "on", ">pw", "~*", "-@all", "+get").Err(); err != nil {
		t.Fatal(err)
	}
	nc := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nomem", Password: "pw"})
	defer nc.Close()
	part, err := Measure(ctx, nc, []string{"big:str", "big:hash"}, DefaultSamples, t0)
	if err == nil || !strings.Contains(err.Error(), "'memory|usage'") || len(part) != 0 {
		t.Fatalf("without +memory|usage: %v, %+v; want an error naming 'memory|usage' and no answer", err, part)
	}
	if n := memoryCalls(t, c); n != 3 {
		t.Errorf("after a refusal redis ran %d MEMORY USAGE, want still 3 (Measure stops at the first error; a refused call is not run)", n)
	}
}

// TestMeasureClusterAsksTheKeysMaster: in a real 3-master cluster, each
// key's MEMORY USAGE runs on the master of its slot, nowhere else.
func TestMeasureClusterAsksTheKeysMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	cl := redistest.Cluster(t)
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer cc.Close()
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for _, k := range keys {
		if err := cc.Set(ctx, k, strings.Repeat("x", 100_000), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Measure(ctx, cc, keys, DefaultSamples, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{} // address → keys it masters
	for _, k := range keys {
		if got[k].Bytes < 100_000 {
			t.Errorf("%s measured %d bytes, want at least 100000", k, got[k].Bytes)
		}
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		want[m.Options().Addr]++
	}
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		if n := memoryCalls(t, c); n != want[addr] {
			t.Errorf("%s ran %d MEMORY USAGE, want %d (the keys it masters)", addr, n, want[addr])
		}
		c.Close()
	}
}
