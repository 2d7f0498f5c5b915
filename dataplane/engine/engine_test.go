package engine_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

func newEngine(t testing.TB, c redis.UniversalClient, opts engine.Options) *engine.Engine {
	e := engine.New(c, opts)
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// rawSum reads the base key and every shard of every generation directly.
func rawSum(t *testing.T, c redis.UniversalClient, en routing.Entry) int64 {
	t.Helper()
	keys := []string{en.Key}
	for _, g := range en.Split.Generations {
		keys = append(keys, routing.ShardKeys(en.Key, g)...)
	}
	var total int64
	for _, k := range keys {
		v, err := c.Get(context.Background(), k).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		total += v
	}
	return total
}

// clean deletes a split entry's base key and every shard, so a test can run
// again on the shared servers (-count).
func clean(t *testing.T, c redis.UniversalClient, en routing.Entry) {
	t.Helper()
	keys := []string{en.Key}
	for _, g := range en.Split.Generations {
		keys = append(keys, routing.ShardKeys(en.Key, g)...)
	}
	for _, k := range keys {
		if err := c.Del(context.Background(), k).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSplitExactUnderConcurrentWriters(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "likes")
			// Generation 0 is retired (it may still hold data), generation 1
			// takes writes now.
			en := routing.Entry{Key: k, Source: routing.SourceDetected, Split: &routing.Split{
				Generations: []routing.Generation{{FromEpoch: 0, Shards: 3}, {FromEpoch: 1, Shards: 5}},
			}}
			clean(t, tg.client, en)
			// Leftovers of the retired generation and the base key count.
			if err := tg.client.Set(ctx, k, 7, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := tg.client.IncrBy(ctx, routing.ShardKey(k, 0, 2, 3), 11).Err(); err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, tg.client, engine.Options{})
			e.SetTable(table(en))
			tg.resetStats(t)
			const writers, each = 50, 100
			var acked atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < each; i++ {
						n := int64(1 + (w+i)%3)
						if w%5 == 0 {
							n = -n // DECRBY
						}
						if _, err := e.IncrBy(ctx, k, n); err != nil {
							t.Errorf("incrby: %v", err)
							return
						}
						acked.Add(n)
					}
				}(w)
			}
			wg.Wait()
			want := 18 + acked.Load()
			v, found, err := e.Get(ctx, k)
			if err != nil || !found {
				t.Fatalf("get: %v %v", found, err)
			}
			if got, _ := strconv.ParseInt(string(v), 10, 64); got != want {
				t.Fatalf("GET = %d, want acknowledged total %d", got, want)
			}
			if got := rawSum(t, tg.client, en); got != want {
				t.Fatalf("raw sum = %d, want %d", got, want)
			}
			// Writes went to the current generation's shards, spread.
			used := 0
			for _, sk := range routing.ShardKeys(k, en.Split.Generations[1]) {
				if n, _ := tg.client.Get(ctx, sk).Int64(); n != 0 {
					used++
				}
			}
			if used < 4 {
				t.Fatalf("only %d of 5 shards took writes", used)
			}
			if tg.name == "cluster" {
				// The write load spreads over the masters: 5 shards on
				// evenly spaced slots put 2, 2 and 1 on the three, so the
				// busiest takes about 1.2x the mean.
				per := tg.perNode(t, "incrby")
				var sum, most int64
				for _, n := range per {
					sum += n
					most = max(most, n)
				}
				if float64(most) > 1.5*float64(sum)/float64(len(per)) {
					t.Fatalf("INCRBY per master %v: busiest over 1.5x the mean", per)
				}
			}
			// Once writes stop, INCR returns the exact total after one refresh.
			n, err := e.IncrBy(ctx, k, 1)
			if err != nil {
				t.Fatal(err)
			}
			eventually.Succeeds(t, 5*time.Second, func() error {
				n, err = e.IncrBy(ctx, k, 0)
				if err != nil || n != want+1 {
					return errors.New("estimate " + strconv.FormatInt(n, 10) + " not yet exact")
				}
				return nil
			})
		})
	}
}

func TestIncrEstimateBound(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	k := key(t, "rate")
	en := routing.Entry{Key: k, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}}
	clean(t, tg.client, en)
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	a := newEngine(t, tg.client, engine.Options{Clock: clk, TotalRefresh: time.Second})
	b := newEngine(t, tg.client, engine.Options{Clock: clk, TotalRefresh: time.Second})
	a.SetTable(table(en))
	b.SetTable(table(en))
	// First INCR reads the total: exact.
	if v, err := a.IncrBy(ctx, k, 1); err != nil || v != 1 {
		t.Fatalf("first INCR = %d, %v; want 1", v, err)
	}
	// Another process adds 10 within the refresh interval.
	for i := 0; i < 10; i++ {
		if _, err := b.IncrBy(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	// a's estimate misses b's increments (at most those of one interval)
	// but counts its own exactly.
	v, err := a.IncrBy(ctx, k, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v != 2 {
		t.Fatalf("within the interval INCR = %d, want last total 1 + own 1 = 2", v)
	}
	// After the interval the next INCR refreshes: exact again.
	clk.Step(time.Second)
	if v, err := a.IncrBy(ctx, k, 1); err != nil || v != 13 {
		t.Fatalf("after refresh INCR = %d, %v; want 13", v, err)
	}
}

func TestSplitSetDel(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "c")
			en := routing.Entry{Key: k, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 3}}}}
			clean(t, tg.client, en)
			e := newEngine(t, tg.client, engine.Options{})
			e.SetTable(table(en))
			for i := 0; i < 20; i++ {
				if _, err := e.IncrBy(ctx, k, 2); err != nil {
					t.Fatal(err)
				}
			}
			if ok, err := e.Set(ctx, k, []byte("5")); err != nil || !ok {
				t.Fatalf("set: %v %v", ok, err)
			}
			if got := rawSum(t, tg.client, en); got != 5 {
				t.Fatalf("after SET 5 total = %d", got)
			}
			if _, err := e.Set(ctx, k, []byte("x")); err == nil {
				t.Fatal("SET of a non-integer on a split counter: want an error")
			}
			if n, err := e.Del(ctx, k); err != nil || n != 1 {
				t.Fatalf("del = %d, %v", n, err)
			}
			v, found, err := e.Get(ctx, k)
			if err != nil || !found || string(v) != "0" {
				t.Fatalf("GET after DEL = %q %v %v, want \"0\"", v, found, err)
			}
		})
	}
}

func TestStampedeOneUpstreamRead(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "product")
			if err := tg.client.Set(ctx, k, "page", 0).Err(); err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, tg.client, engine.Options{})
			e.SetTable(table(routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60_000, JitterPercent: 10}}))
			tg.resetStats(t)
			errs := stampede(ctx, e, k, 10_000, func(v []byte, found bool, err error) bool {
				return err != nil || !found || string(v) != "page"
			})
			if errs != 0 {
				t.Fatalf("%d of 10000 GETs failed", errs)
			}
			if got := tg.calls(t, "get"); got != 1 {
				t.Fatalf("upstream GETs = %d, want exactly 1", got)
			}
		})
	}
}

// stampede runs n concurrent GETs of k released together (each bounded by
// ctx, and by 30 s) and returns how many results count says to count.
func stampede(ctx context.Context, e *engine.Engine, k string, n int, count func(v []byte, found bool, err error) bool) int64 {
	var counted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if count(e.Get(cctx, k)) {
				counted.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return counted.Load()
}

func TestStampedeUpstreamErrorReachesEveryWaiter(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "list")
			// A real upstream error: GET of a list is WRONGTYPE.
			if err := tg.client.RPush(ctx, k, "a").Err(); err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, tg.client, engine.Options{})
			e.SetTable(table(routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60_000}}))
			got := stampede(ctx, e, k, 10_000, func(_ []byte, _ bool, err error) bool {
				return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
			})
			if got != 10_000 {
				t.Fatalf("%d of 10000 waiters got the upstream error", got)
			}
		})
	}
}

func TestStampedeHungUpstreamReleasesWaiters(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	k := key(t, "paused")
	e := newEngine(t, tg.client, engine.Options{UpstreamTimeout: 500 * time.Millisecond})
	e.SetTable(table(routing.Entry{Key: k, Coalesce: true}))
	admin := tg.nodes[0]
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "1000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "CLIENT", "UNPAUSE") })
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	got := stampede(wctx, e, k, 1000, func(_ []byte, _ bool, err error) bool {
		return errors.Is(err, context.DeadlineExceeded)
	})
	if got != 1000 {
		t.Fatalf("%d of 1000 waiters returned at their deadline", got)
	}
}

func TestReplicate(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := "{user:1}:" + key(t, "profile")
			en := routing.Entry{Key: k, Replicate: &routing.Replicate{Replicas: 3, TTLMillis: 10_000}}
			var pick atomic.Int64
			e := newEngine(t, tg.client, engine.Options{IntN: func(n int) int { return int(pick.Load()) % n }})
			e.SetTable(table(en))
			if ok, err := e.Set(ctx, k, []byte("v1")); err != nil || !ok {
				t.Fatalf("set: %v %v", ok, err)
			}
			for _, r := range routing.ReplicaKeys(k, 3) {
				v, err := tg.client.Get(ctx, r).Result()
				if err != nil || v != "v1" {
					t.Fatalf("replica %s = %q, %v", r, v, err)
				}
				pttl := tg.client.PTTL(ctx, r).Val()
				if pttl <= 0 || pttl > 10*time.Second {
					t.Fatalf("replica TTL = %v, want (0, 10s]", pttl)
				}
			}
			if pttl := tg.client.PTTL(ctx, k).Val(); pttl != -1 {
				t.Fatalf("base key TTL = %v, want none", pttl)
			}
			// Every copy serves the value; reads spread over base + replicas.
			tg.resetStats(t)
			for i := 0; i < 4; i++ {
				pick.Store(int64(i))
				if v, _, err := e.Get(ctx, k); err != nil || string(v) != "v1" {
					t.Fatalf("read copy %d = %q, %v", i, v, err)
				}
			}
			if tg.name == "cluster" {
				for i, n := range tg.perNode(t, "get") {
					if n == 0 {
						t.Errorf("node %d served no read of the replicated key", i)
					}
				}
			}
			// A base TTL shorter than the replica TTL caps the replicas'.
			if _, err := e.Set(ctx, k, []byte("v2"), "PX", "1500"); err != nil {
				t.Fatal(err)
			}
			for _, r := range routing.ReplicaKeys(k, 3) {
				if pttl := tg.client.PTTL(ctx, r).Val(); pttl <= 0 || pttl > 1500*time.Millisecond {
					t.Fatalf("replica TTL = %v, want (0, 1.5s]", pttl)
				}
			}
			// NX on an existing key writes nothing anywhere.
			if ok, err := e.Set(ctx, k, []byte("v3"), "NX"); err != nil || ok {
				t.Fatalf("SET NX on existing key: ok=%v err=%v", ok, err)
			}
			if v := tg.client.Get(ctx, routing.ReplicaKey(k, 0, 3)).Val(); v != "v2" {
				t.Fatalf("replica after refused NX = %q", v)
			}
			if n, err := e.Del(ctx, k); err != nil || n != 1 {
				t.Fatalf("del = %d, %v", n, err)
			}
			for _, r := range append([]string{k}, routing.ReplicaKeys(k, 3)...) {
				if n := tg.client.Exists(ctx, r).Val(); n != 0 {
					t.Fatalf("%s survived DEL", r)
				}
			}
			// INCR updates the replicas too.
			if v, err := e.IncrBy(ctx, k, 5); err != nil || v != 5 {
				t.Fatalf("incr = %d, %v", v, err)
			}
			if v := tg.client.Get(ctx, routing.ReplicaKey(k, 2, 3)).Val(); v != "5" {
				t.Fatalf("replica after INCR = %q", v)
			}
		})
	}
}

func TestPreAggregateFlush(t *testing.T) {
	tg := targets(t)[1]
	ctx := context.Background()
	k := key(t, "views")
	en := routing.Entry{Key: k, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 3}}},
		PreAggregate: &routing.PreAggregate{FlushMillis: 100}}
	clean(t, tg.client, en)
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	e := engine.New(tg.client, engine.Options{Clock: clk})
	e.SetTable(table(en))
	for i := 1; i <= 10; i++ {
		v, err := e.IncrBy(ctx, k, 1)
		if err != nil || v != int64(i) {
			t.Fatalf("INCR %d returned %d, %v; want the local total %d", i, v, err, i)
		}
	}
	if got := rawSum(t, tg.client, en); got != 0 {
		t.Fatalf("before the flush Redis holds %d, want 0", got)
	}
	// A read through the same engine sees the increments it holds, as the
	// INCR replies did (the differential harness found GET behind them).
	if v, found, err := e.Get(ctx, k); err != nil || !found || string(v) != "10" {
		t.Fatalf("GET before the flush: %q, %v, %v; want 10, the pending increments", v, found, err)
	}
	eventually.Succeeds(t, 5*time.Second, func() error {
		if !clk.HasWaiters() {
			return errors.New("flush timer not armed")
		}
		return nil
	})
	clk.Step(100 * time.Millisecond)
	eventually.Succeeds(t, 5*time.Second, func() error {
		if got := rawSum(t, tg.client, en); got != 10 {
			return errors.New("flushed total " + strconv.FormatInt(got, 10))
		}
		return nil
	})
	// Leaving pre-aggregation flushes what is pending at once.
	if _, err := e.IncrBy(ctx, k, 3); err != nil {
		t.Fatal(err)
	}
	plain := en
	plain.PreAggregate = nil
	e.SetTable(table(plain))
	eventually.Succeeds(t, 5*time.Second, func() error {
		if got := rawSum(t, tg.client, en); got != 13 {
			return errors.New("total " + strconv.FormatInt(got, 10))
		}
		return nil
	})
	e.SetTable(table(en))
	// Close flushes what is pending.
	if _, err := e.IncrBy(ctx, k, 5); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := rawSum(t, tg.client, en); got != 18 {
		t.Fatalf("after Close Redis holds %d, want 18", got)
	}
}

func TestLookupAndUnmitigatedKeys(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	e := newEngine(t, tg.client, engine.Options{})
	k := key(t, "plain")
	if err := tg.client.Del(ctx, k).Err(); err != nil {
		t.Fatal(err)
	}
	if e.Lookup(k) {
		t.Fatal("empty table: Lookup = true")
	}
	e.SetTable(table(routing.Entry{Key: k + ":hot", Coalesce: true}))
	if e.Lookup(k) || !e.Lookup(k+":hot") {
		t.Fatal("Lookup disagrees with the table")
	}
	// Keys not in the table behave exactly as Redis.
	if ok, err := e.Set(ctx, k, []byte("1"), "NX"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, err := e.Set(ctx, k, []byte("1"), "NX"); err != nil || ok {
		t.Fatal(ok, err)
	}
	if v, err := e.IncrBy(ctx, k, 2); err != nil || v != 3 {
		t.Fatal(v, err)
	}
	if _, err := e.Set(ctx, k, []byte("1"), "EX"); err == nil {
		t.Fatal("SET EX without a value: want a syntax error")
	}
}

func TestScheduledEntryOutsideItsWindow(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	k := key(t, "sched")
	for _, r := range append([]string{k}, routing.ReplicaKeys(k, 2)...) {
		if err := tg.client.Del(ctx, r).Err(); err != nil {
			t.Fatal(err)
		}
	}
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	from := clk.Now().Add(time.Minute)
	e := newEngine(t, tg.client, engine.Options{Clock: clk})
	e.SetTable(table(routing.Entry{Key: k, Source: routing.SourceScheduled, NotBefore: &from,
		Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 10_000}}))
	if _, err := e.Set(ctx, k, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if n := tg.client.Exists(ctx, routing.ReplicaKeys(k, 2)...).Val(); n != 0 {
		t.Fatalf("replicas written before NotBefore: %d", n)
	}
	clk.Step(time.Minute)
	if _, err := e.Set(ctx, k, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if n := tg.client.Exists(ctx, routing.ReplicaKeys(k, 2)...).Val(); n != 2 {
		t.Fatalf("replicas written inside the window: %d, want 2", n)
	}
}

func TestReplicateKeepTTLDoesNotOutliveTheBase(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "kt")
			e := newEngine(t, tg.client, engine.Options{})
			e.SetTable(table(routing.Entry{Key: k, Replicate: &routing.Replicate{Replicas: 3, TTLMillis: 60_000}}))
			replicaTTLs := func(want string) []time.Duration {
				var out []time.Duration
				for _, r := range routing.ReplicaKeys(k, 3) {
					if v := tg.client.Get(ctx, r).Val(); v != want {
						t.Fatalf("replica %s = %q, want %q", r, v, want)
					}
					out = append(out, tg.client.PTTL(ctx, r).Val())
				}
				return out
			}
			// The base key expires in 5 s: KEEPTTL keeps that, and the
			// replicas get no more than the base key has left.
			if ok, err := e.Set(ctx, k, []byte("v1"), "EX", 5); err != nil || !ok {
				t.Fatal(ok, err)
			}
			if ok, err := e.Set(ctx, k, []byte("v2"), "KEEPTTL"); err != nil || !ok {
				t.Fatal(ok, err)
			}
			if d := tg.client.PTTL(ctx, k).Val(); d <= 0 || d > 5*time.Second {
				t.Fatalf("base TTL after KEEPTTL = %v, want (0, 5s]", d)
			}
			replicaTTLs("v2")
			base := tg.client.Do(ctx, "PEXPIRETIME", k).Val().(int64)
			for _, r := range routing.ReplicaKeys(k, 3) {
				if at := tg.client.Do(ctx, "PEXPIRETIME", r).Val().(int64); at <= 0 || at > base {
					t.Fatalf("replica %s expires at %d, after the base key (%d)", r, at, base)
				}
			}
			// A base key without a TTL: replicas get the replica TTL.
			if _, err := e.Set(ctx, k, []byte("v3")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Set(ctx, k, []byte("v4"), "KEEPTTL"); err != nil {
				t.Fatal(err)
			}
			if d := tg.client.PTTL(ctx, k).Val(); d != -1 {
				t.Fatalf("base TTL = %v, want none", d)
			}
			for _, d := range replicaTTLs("v4") {
				if d <= 5*time.Second || d > 60*time.Second {
					t.Fatalf("replica TTL %v, want the replica TTL (60s)", d)
				}
			}
			// XX KEEPTTL on a missing key writes nothing.
			if err := tg.client.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
			if ok, err := e.Set(ctx, k, []byte("v5"), "XX", "KEEPTTL"); err != nil || ok {
				t.Fatalf("SET XX KEEPTTL on a missing key = %v, %v", ok, err)
			}
		})
	}
}
