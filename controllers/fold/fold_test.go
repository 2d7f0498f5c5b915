package fold

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

var errKilled = errors.New("killed")

// total is the base key plus every shard of gens.
func total(t *testing.T, ctx context.Context, c redis.UniversalClient, key string, gens []routing.Generation) int64 {
	t.Helper()
	keys := []string{key}
	for _, g := range gens {
		keys = append(keys, routing.ShardKeys(key, g)...)
	}
	var sum int64
	for _, k := range keys {
		v, err := c.Get(ctx, k).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("get: %v", err)
		}
		sum += v
	}
	return sum
}

// TestFoldKilledAtEachStep leaves a fold dead before each step, then lets a
// fresh folder finish: the counter is conserved and the shards end at 0.
func TestFoldKilledAtEachStep(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := redistest.Standalone(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	gen := routing.Generation{FromEpoch: 7, Shards: 4}
	for _, step := range []Step{StepRead, StepCredit, StepDebit, StepClear} {
		t.Run(fmt.Sprint(step), func(t *testing.T) {
			key := fmt.Sprintf("likes:%d", step)
			c.Set(ctx, key, 10, 0)
			for i, s := range routing.ShardKeys(key, gen) {
				c.Set(ctx, s, i+1, 0) // 1+2+3+4
			}
			dying := New(c, Options{Fault: func(s Step) error {
				if s == step {
					return errKilled
				}
				return nil
			}})
			if _, err := dying.Generation(ctx, key, gen); !errors.Is(err, errKilled) {
				t.Fatalf("dying fold: err = %v, want killed", err)
			}
			if got := total(t, ctx, c, key, []routing.Generation{gen}); got != 20 && step != StepDebit {
				t.Errorf("after kill: total = %d, want 20", got)
			}
			res, err := New(c, Options{}).Generation(ctx, key, gen)
			if err != nil || !res.Done {
				t.Fatalf("fresh fold: %+v, %v", res, err)
			}
			if got, _ := c.Get(ctx, key).Int64(); got != 20 {
				t.Errorf("base = %d, want 20", got)
			}
			if got := total(t, ctx, c, key, []routing.Generation{gen}); got != 20 {
				t.Errorf("total = %d, want 20", got)
			}
		})
	}
}

// TestRetire gives the shards and ack keys of a folded generation a TTL, and
// touches nothing else.
func TestRetire(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := redistest.Standalone(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	gen := routing.Generation{FromEpoch: 9, Shards: 3}
	key := "likes:retire"
	c.Set(ctx, key, 1, 0)
	for _, s := range routing.ShardKeys(key, gen) {
		c.Set(ctx, s, 2, 0)
	}
	folder := New(c, Options{})
	if res, err := folder.Generation(ctx, key, gen); err != nil || !res.Done {
		t.Fatalf("fold: %+v, %v", res, err)
	}
	if err := folder.Retire(ctx, key, gen, RetiredTTL); err != nil {
		t.Fatal(err)
	}
	for _, s := range routing.ShardKeys(key, gen) {
		for _, k := range []string{s, routing.FoldAckKey(s), routing.FoldDebitKey(s)} {
			if ttl := c.TTL(ctx, k).Val(); ttl <= 0 || ttl > RetiredTTL {
				t.Errorf("TTL of %s = %v, want in (0, %v]", k, ttl, RetiredTTL)
			}
		}
	}
	if ttl := c.TTL(ctx, key).Val(); ttl != -1 {
		t.Errorf("base key TTL = %v, want none", ttl)
	}
	if v, _ := c.Get(ctx, key).Int64(); v != 7 {
		t.Errorf("base = %d, want 7", v)
	}
	// The ledger keeps nothing of a retired generation; each shard's
	// sequence number waits in a key that outlives its ack key.
	ledger := routing.SameSlotKey(key, "fold")
	if fields := c.HKeys(ctx, ledger).Val(); len(fields) != 0 {
		t.Errorf("ledger fields after Retire = %q, want none", fields)
	}
	for _, s := range routing.ShardKeys(key, gen) {
		k := seqKey(key, s)
		if ttl := c.TTL(ctx, k).Val(); ttl <= RetiredTTL || ttl > 2*RetiredTTL {
			t.Errorf("TTL of %s = %v, want in (%v, %v]", k, ttl, RetiredTTL, 2*RetiredTTL)
		}
	}
	// A late writer's increment on a retired shard, folded by a stale
	// folder: the move gets a number above the ack key's, so its debit
	// applies and nothing is counted twice.
	shard := routing.ShardKeys(key, gen)[0]
	c.IncrBy(ctx, shard, 5)
	if _, err := folder.Generation(ctx, key, gen); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get(ctx, key).Int64(); v != 12 {
		t.Errorf("base after folding a late increment = %d, want 12", v)
	}
	if v, _ := c.Get(ctx, shard).Int64(); v != 0 {
		t.Errorf("shard after folding its late increment = %d, want 0 (debit skipped?)", v)
	}
}

// TestFoldInvariantCluster is the invariant of docs/design.md on a real 3-master
// cluster: writers increment through the engine while the split is resized,
// unsplit and split again; folders are killed at random points (fault
// injection between steps and context cancellation mid-command) and fresh
// ones take over. Once traffic stops and a clean fold completes, the base
// key holds exactly the acknowledged increments and every shard ever used
// reads 0.
func TestFoldInvariantCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	cl := redistest.Cluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const key = "{user:1}:likes"
	const epochMillis = 1000
	rng := rand.New(rand.NewPCG(1, 2))

	// On-time writers follow clk; one late writer follows lag, an epoch
	// behind, so retired generations receive increments while they fold.
	start := routing.EpochStart(100, epochMillis)
	clk := clocktesting.NewFakeClock(start)
	lag := clocktesting.NewFakeClock(start)
	var engines []*engine.Engine
	for i := range 4 {
		ck := clk
		if i == 3 {
			ck = lag
		}
		e := engine.New(c, engine.Options{Clock: ck})
		t.Cleanup(func() { _ = e.Close() })
		engines = append(engines, e)
	}
	var gens []routing.Generation
	publish := func() {
		tbl := &routing.Table{SchemaVersion: routing.SchemaVersion, Policy: "t/p", EpochMillis: epochMillis}
		if len(gens) > 0 {
			tbl.Entries = []routing.Entry{{Key: key, Source: routing.SourceDetected, Split: &routing.Split{Generations: append([]routing.Generation(nil), gens...)}}}
		}
		if err := tbl.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, e := range engines {
			e.SetTable(tbl)
		}
	}

	var acked, kills atomic.Int64
	var writeErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.IncrBy(ctx, key, 1); err != nil {
					writeErr.Store(err)
					return
				}
				acked.Add(1)
			}
		}()
	}
	progress := func(n int64) {
		t.Helper()
		want := acked.Load() + n
		eventually.Succeeds(t, 30*time.Second, func() error {
			if err := writeErr.Load(); err != nil {
				return eventually.Permanent(fmt.Errorf("writer: %v", err))
			}
			if acked.Load() < want {
				return errors.New("writers made no progress")
			}
			return nil
		})
	}
	used := map[routing.Generation]bool{}

	// foldRetired runs folders that may die, then (if mustFinish) fresh ones
	// until every retired generation is folded.
	foldRetired := func(mustFinish bool) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			p := 0.15
			if attempt > 40 {
				p = 0 // keep the test bounded; the kills were exercised
			}
			opts := Options{Fault: func(Step) error {
				if rng.Float64() < p {
					kills.Add(1)
					return errKilled
				}
				return nil
			}}
			fctx, cancel := context.WithCancel(ctx)
			if p > 0 && rng.IntN(3) == 0 {
				// Die mid-command: the cancellation may land before, while
				// or after Redis applies it.
				d := time.Duration(rng.IntN(300)) * time.Microsecond
				time.AfterFunc(d, cancel)
			}
			f := New(c, opts)
			allDone := true
			for _, g := range gens[:len(gens)-1] {
				if g.Shards == 0 {
					continue
				}
				res, err := f.Generation(fctx, key, g)
				if err != nil || !res.Done {
					allDone = false
					break
				}
			}
			cancel()
			if !mustFinish && attempt >= 5 {
				return
			}
			if mustFinish && allDone {
				// Every retired generation is folded: remove them, then
				// give their keys the retired TTL as the manager does.
				retired := gens[:len(gens)-1]
				gens = gens[len(gens)-1:]
				publish()
				for _, g := range retired {
					if err := New(c, Options{}).Retire(ctx, key, g, RetiredTTL); err != nil {
						t.Errorf("retire: %v", err)
					}
				}
				return
			}
		}
	}

	epoch := int64(100)
	for _, n := range []int32{4, 8, 0, 3, 16, 2, 0} {
		g := routing.Generation{FromEpoch: epoch + 1, Shards: n}
		used[g] = true
		gens = append(gens, g)
		publish()
		progress(200)
		epoch++
		clk.SetTime(routing.EpochStart(epoch, epochMillis))
		progress(200)
		foldRetired(false) // racing the late writer
		lag.SetTime(routing.EpochStart(epoch, epochMillis))
		progress(200)
		foldRetired(true)
		progress(100)
	}
	close(stop)
	wg.Wait()
	if err := writeErr.Load(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	foldRetired(true)

	want := acked.Load()
	if got := total(t, ctx, c, key, gens); got != want {
		t.Errorf("counter = %d, acknowledged increments = %d", got, want)
	}
	for g := range used {
		for _, s := range routing.ShardKeys(key, g) {
			if v, _ := c.Get(ctx, s).Int64(); v != 0 && g != gens[len(gens)-1] {
				t.Errorf("shard of retired generation %d holds %d", g.FromEpoch, v)
			}
		}
	}
	if got, _ := c.Get(ctx, key).Int64(); got != want {
		t.Errorf("base key = %d, want %d (the last generation is unsplit)", got, want)
	}
	if kills.Load() == 0 {
		t.Error("no folder was killed: the test proved nothing")
	}
	t.Logf("%d acknowledged increments over %d generations, %d folders killed", want, len(used), kills.Load())
}
