// Command replicabench measures replica reads (mitigations.replicaReads)
// on a real 3-master Redis Cluster with 2 replicas per master: one
// read-hot key read at twice its master's capacity (the policy's
// capacity.perShardReadsPerSecond, a declared number: the machine cannot
// saturate a real Redis), through the routing engine, side by side with
// the same workload without the move. It reports each node's share of the
// key's reads (INFO commandstats), the busiest node ÷ the mean, client
// latency, and the staleness after a write: for writes made during the
// replica-read run, the time until every replica of the key's shard
// answers the new value (each replica polled directly, with READONLY), and
// until a read through the engine does.
//
// The manager's decision is the real one: decide.Decide on the measured
// rate, with the policy's local cache and coalescing off so that every
// read reaches Redis (with them on, the cache answers nearly every read
// and replicas serve its misses).
//
// It prints one Markdown section to stdout; progress goes to stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/ptr"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
	"github.com/heatsink-dev/heatsink/routing"
)

func main() {
	capacity := flag.Int("capacity", 4000, "the master's declared read capacity, reads/s (the key is read at twice it)")
	duration := flag.Duration("duration", 10*time.Second, "length of each run")
	workers := flag.Int("workers", 32, "concurrent readers")
	writes := flag.Int("writes", 100, "writes (staleness samples) during the replica-read run")
	repeats := flag.Int("repeats", 3, "runs of each case, interleaved")
	flag.Parse()
	log.SetOutput(os.Stderr)
	ctx := context.Background()

	log.Print("replicabench: starting a 3-master cluster with 2 replicas per master")
	c, err := redisproc.StartClusterReplicas(ctx, 3, 2)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 2 * *workers})
	defer cc.Close()
	const key = "product:42"
	if err := cc.Set(ctx, key, "v0", 0).Err(); err != nil {
		log.Fatal(err)
	}
	shard := shardOf(ctx, cc, key)

	// The manager's decision for a key read at twice the capacity.
	spec := &v1alpha1.HotKeyPolicySpec{}
	spec.Target.Cluster = true
	m := &spec.Mitigations
	m.Coalesce.Enabled, m.LocalCache.Enabled = ptr.To(false), ptr.To(false)
	m.ReplicaReads.Enabled, m.Replicate.Enabled = ptr.To(true), ptr.To(true)
	spec.Capacity.PerShardReadsPerSecond = int64(*capacity)
	spec.Capacity.HeadroomPercent = 25
	spec.Thresholds.ReadsPerSecond = int64(*capacity) / 2
	v1alpha1.SetDefaults(spec)
	entries := decideEntries(spec, key, int64(2**capacity))
	log.Printf("replicabench: the manager's entry for %s at %d reads/s: %+v", key, 2**capacity, entries)

	rate := 2 * *capacity
	results := map[string][]run{}
	for r := 0; r < *repeats; r++ {
		for _, cs := range []string{"without", "replicaReads"} {
			if r%2 == 1 {
				cs = map[string]string{"without": "replicaReads", "replicaReads": "without"}[cs]
			}
			t := &routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: spec.Mitigations.Split.Epoch.Milliseconds()}
			if cs == "replicaReads" {
				t.Entries = entries
				t.Replicas = &routing.ReplicaSettings{CheckMillis: spec.Mitigations.ReplicaReads.LagCheckInterval.Milliseconds()}
			}
			w := 0
			if cs == "replicaReads" {
				w = *writes
			}
			log.Printf("replicabench: repeat %d, %s: %d reads/s for %s", r+1, cs, rate, *duration)
			res := measure(ctx, c, cc, t, key, shard, rate, *workers, *duration, w)
			results[cs] = append(results[cs], res)
		}
	}
	report(results, shard, rate, *capacity, *duration, *workers, entries)
}

// decideEntries runs the manager's decision on the key's rate until it is
// hot (sustainFor passed) and returns the table entries.
func decideEntries(spec *v1alpha1.HotKeyPolicySpec, key string, reads int64) []routing.Entry {
	obs := map[string]decide.Observation{key: {ReadsPerSecond: reads}}
	now := time.Unix(1_000_000, 0)
	var st decide.State
	var out decide.Output
	for _, at := range []time.Duration{0, spec.Thresholds.SustainFor.Duration} {
		out = decide.Decide(decide.Input{Now: now.Add(at), Spec: spec, Observations: obs, State: st, Margin: 10 * time.Second})
		st = out.State
	}
	return out.Entries
}

// shard is the key's master and replicas.
type shard struct{ master, replicas []string }

func shardOf(ctx context.Context, cc *redis.ClusterClient, key string) shard {
	slot := int(routing.Slot(key))
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) == 3 {
			return shard{master: []string{s.Nodes[0].Addr}, replicas: []string{s.Nodes[1].Addr, s.Nodes[2].Addr}}
		}
	}
	log.Fatalf("no shard with 2 replicas serves slot %d", slot)
	return shard{}
}

type run struct {
	gets      map[string]int // GETs per node
	reads     int            // reads completed
	errors    int
	lat       []time.Duration
	stale     []time.Duration // write → every replica has the value
	staleEng  []time.Duration // write → a read through the engine has it
	elapsedOK time.Duration
}

func measure(ctx context.Context, c *redisproc.Cluster, cc *redis.ClusterClient, t *routing.Table, key string, sh shard, rate, workers int, d time.Duration, writes int) run {
	e := engine.New(cc, engine.Options{})
	defer e.Close()
	e.SetTable(t)
	if t.Replicas != nil {
		deadline := time.Now().Add(20 * time.Second)
		for usable(e) < 2 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, a := range c.Addrs() {
		if _, err := redisproc.Command(a, "CONFIG", "RESETSTAT"); err != nil {
			log.Fatal(err)
		}
	}
	var res run
	var mu sync.Mutex
	tokens := make(chan struct{}, rate)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads, errs atomic.Int64
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			for {
				select {
				case <-stop:
					mu.Lock()
					res.lat = append(res.lat, lat...)
					mu.Unlock()
					return
				case <-tokens:
				}
				t0 := time.Now()
				_, _, err := e.Get(ctx, key)
				lat = append(lat, time.Since(t0))
				if err != nil {
					errs.Add(1)
				} else {
					reads.Add(1)
				}
			}
		}()
	}
	// Open loop: rate tokens a second, in 1 ms steps, for d.
	start := time.Now()
	var staleWG sync.WaitGroup
	if writes > 0 {
		staleWG.Add(1)
		go func() {
			defer staleWG.Done()
			res.stale, res.staleEng = staleness(ctx, cc, e, key, sh, writes, d)
		}()
	}
	tk := time.NewTicker(time.Millisecond)
	sent := 0
	for now := range tk.C {
		el := now.Sub(start)
		if el >= d {
			break
		}
		for want := int(el.Seconds() * float64(rate)); sent < want; sent++ {
			select {
			case tokens <- struct{}{}:
			default: // the readers fell behind: the token is dropped, and counted as not read
			}
		}
	}
	tk.Stop()
	close(stop)
	wg.Wait()
	staleWG.Wait()
	res.elapsedOK = time.Since(start)
	res.reads, res.errors = int(reads.Load()), int(errs.Load())
	res.gets = map[string]int{}
	for _, a := range c.Addrs() {
		res.gets[a] = getCalls(a)
	}
	return res
}

func usable(e *engine.Engine) int {
	n := 0
	for _, l := range e.ReplicaLags() {
		if l >= 0 && l <= time.Second {
			n++
		}
	}
	return n
}

// staleness writes a new value to the key every d/writes and measures,
// for each write, how long until every replica of its shard answers it
// (polled directly, READONLY) and until a read through the engine does.
func staleness(ctx context.Context, cc *redis.ClusterClient, e *engine.Engine, key string, sh shard, writes int, d time.Duration) (all, eng []time.Duration) {
	var reps []*redis.Client
	for _, a := range sh.replicas {
		r := redis.NewClient(&redis.Options{Addr: a, OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
		defer r.Close()
		reps = append(reps, r)
	}
	every := d / time.Duration(writes+1)
	for i := 1; i <= writes; i++ {
		time.Sleep(every)
		val := "v" + strconv.Itoa(i)
		if err := cc.Set(ctx, key, val, 0).Err(); err != nil {
			log.Fatal(err)
		}
		t0 := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var worst time.Duration
		for _, r := range reps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(t0) < 5*time.Second {
					if v, _ := r.Get(ctx, key).Result(); v == val {
						break
					}
				}
				mu.Lock()
				worst = max(worst, time.Since(t0))
				mu.Unlock()
			}()
		}
		var engAt time.Duration
		for time.Since(t0) < 5*time.Second {
			if v, _, _ := e.Get(ctx, key); string(v) == val {
				break
			}
		}
		engAt = time.Since(t0)
		wg.Wait()
		all, eng = append(all, worst), append(eng, engAt)
	}
	return all, eng
}

func getCalls(addr string) int {
	info, err := redisproc.Command(addr, "INFO", "commandstats")
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

func report(results map[string][]run, sh shard, rate, capacity int, d time.Duration, workers int, entries []routing.Entry) {
	fmt.Println("## Replica reads (mitigations.replicaReads)")
	fmt.Println()
	fmt.Printf("One key read at %d reads/s, twice its master's declared capacity (`capacity.perShardReadsPerSecond: %d`), by %d concurrent readers through the routing engine (open loop, %s per run), on a real 3-master Redis Cluster with 2 replicas per master on loopback. ", rate, capacity, workers, d)
	fmt.Printf("`without`: the key is not mitigated; `replicaReads`: the entry the manager decides for that rate with local cache and coalescing off (%s). Runs interleaved; each row is one run. ", describe(entries))
	fmt.Println("Shares are of the GETs each node served during the run (INFO commandstats); busiest ÷ mean over the key's shard (its master and 2 replicas) and over all 9 nodes.")
	fmt.Println()
	fmt.Println("| case | reads done | errors | master's share | replica 1 | replica 2 | busiest ÷ mean (shard) | busiest ÷ mean (9 nodes) | read p50 | read p99 |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, cs := range []string{"without", "replicaReads"} {
		for _, r := range results[cs] {
			total, busiest := 0, 0
			for _, n := range r.gets {
				total += n
				busiest = max(busiest, n)
			}
			share := func(a string) string { return fmt.Sprintf("%.1f %%", 100*float64(r.gets[a])/float64(max(total, 1))) }
			shardN := []int{r.gets[sh.master[0]], r.gets[sh.replicas[0]], r.gets[sh.replicas[1]]}
			sb, ss := 0, 0
			for _, n := range shardN {
				sb, ss = max(sb, n), ss+n
			}
			fmt.Printf("| %s | %d | %d | %s | %s | %s | %.2f | %.2f | %s | %s |\n", cs, r.reads, r.errors, share(sh.master[0]), share(sh.replicas[0]), share(sh.replicas[1]),
				float64(sb)/(float64(ss)/3), float64(busiest)/(float64(total)/float64(len(r.gets))), pct(r.lat, 0.5).Round(time.Microsecond), pct(r.lat, 0.99).Round(time.Microsecond))
		}
	}
	fmt.Println()
	var all, eng []time.Duration
	for _, r := range results["replicaReads"] {
		all, eng = append(all, r.stale...), append(eng, r.staleEng...)
	}
	fmt.Printf("Staleness after a write, during the replicaReads runs under the same load (%d writes; the write's reply is time 0; pollers on the loopback add their own round trip):\n\n", len(all))
	fmt.Println("| until | p50 | p99 | max |")
	fmt.Println("|---|---:|---:|---:|")
	fmt.Printf("| every replica of the shard answers the new value | %s | %s | %s |\n", pct(all, 0.5).Round(time.Microsecond), pct(all, 0.99).Round(time.Microsecond), pct(all, 1).Round(time.Microsecond))
	fmt.Printf("| a read through the engine answers it | %s | %s | %s |\n", pct(eng, 0.5).Round(time.Microsecond), pct(eng, 0.99).Round(time.Microsecond), pct(eng, 1).Round(time.Microsecond))
	fmt.Println()
}

func describe(entries []routing.Entry) string {
	if len(entries) != 1 {
		return fmt.Sprintf("%d entries", len(entries))
	}
	e := entries[0]
	var parts []string
	if e.ReplicaReads != nil {
		parts = append(parts, fmt.Sprintf("replicaReads, maxLag %d ms", e.ReplicaReads.MaxLagMillis))
	}
	if e.Replicate != nil {
		parts = append(parts, fmt.Sprintf("replicate ×%d", e.Replicate.Replicas))
	}
	if e.LocalCache != nil {
		parts = append(parts, "localCache")
	}
	if e.Coalesce {
		parts = append(parts, "coalesce")
	}
	return strings.Join(parts, ", ")
}
