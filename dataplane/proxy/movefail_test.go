package proxy_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// outcomeRecorder is an OutcomeObserver counting the commands moves served
// and failed per key, and the commands sent raw and failed; and the
// reads among each.
type outcomeRecorder struct {
	recorder
	omu                 sync.Mutex
	served, failed      map[string]int
	rawTotal, rawFailed int
	reads               [4]int // moves' reads served and failed, raw reads and failed
}

func (r *outcomeRecorder) ObserveMoved(policy, key string, read, failed bool) {
	r.omu.Lock()
	defer r.omu.Unlock()
	r.served[policy+"|"+key]++
	if failed {
		r.failed[policy+"|"+key]++
	}
	if read {
		r.reads[0]++
		if failed {
			r.reads[1]++
		}
	}
}

func (r *outcomeRecorder) ObserveRaw(policy string, read, failed bool) {
	r.omu.Lock()
	defer r.omu.Unlock()
	r.rawTotal++
	if failed {
		r.rawFailed++
	}
	if read {
		r.reads[2]++
		if failed {
			r.reads[3]++
		}
	}
}

// takeReads returns the reads among the counts so far (moves' served and
// failed, raw and failed) and starts them over.
func (r *outcomeRecorder) takeReads() [4]int {
	r.omu.Lock()
	defer r.omu.Unlock()
	out := r.reads
	r.reads = [4]int{}
	return out
}

// take returns the counts so far and starts over.
func (r *outcomeRecorder) take(key string) (served, failed, rawTotal, rawFailed int) {
	r.omu.Lock()
	defer r.omu.Unlock()
	served, failed, rawTotal, rawFailed = r.served["ns/p|"+key], r.failed["ns/p|"+key], r.rawTotal, r.rawFailed
	clear(r.served)
	clear(r.failed)
	r.rawTotal, r.rawFailed = 0, 0
	return
}

// TestMoveFailuresReportedWithBaseline: in a real 3-master cluster, a
// counter split over 4 shards, some of which live on a master that is then
// stopped: the INCRs and GETs the split serves are reported as served by
// its move, and a GET, which needs every shard, as failed once one is on
// the stopped master, while the same proxy's direct GETs of keys
// on the other masters are reported as the baseline, none failed. Redis'
// own errors (INCR of text) are no failure. With every master stopped,
// direct commands fail too, and are reported so: what keeps a failover
// from withdrawing a split.
func TestMoveFailuresReportedWithBaseline(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := context.Background()
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer direct.Close()
	flushAll(t, cl.Addrs())
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: "likes", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}}}})
	rec := &outcomeRecorder{recorder: recorder{m: map[string][3]uint32{}}, served: map[string]int{}, failed: map[string]int{}}
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, Engine: eng, Observer: rec, Policy: "ns/p",
		Timeout: 300 * time.Millisecond})
	c := redis.NewClient(&redis.Options{Addr: addr}) // go-redis defaults
	defer c.Close()

	// A master of a shard of likes (not the proxy's seed), and plain keys
	// on the other masters.
	nodeOf := func(key string) string {
		n, err := direct.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	var stopped string
	for i := range 4 {
		if a := nodeOf(routing.ShardKey("likes", 0, i, 4)); a != cl.Addrs()[0] {
			stopped = a
		}
	}
	if stopped == "" {
		t.Fatal("every shard of likes on the seed")
	}
	var plain []string
	for i := 0; len(plain) < 10; i++ {
		if k := fmt.Sprint("plain:", i); nodeOf(k) != stopped {
			plain = append(plain, k)
		}
	}
	if err := direct.Set(ctx, plain[0], "text", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// round sends n INCR of likes (with incr) and n GET of plain keys,
	// then one GET of likes (the split's read of every shard).
	round := func(n int, incr bool) {
		for i := range n {
			if incr {
				_ = c.Incr(ctx, "likes").Err()
			}
			_ = c.Get(ctx, plain[i%len(plain)]).Err()
		}
		_ = c.Get(ctx, "likes").Err()
	}
	round(40, true)
	if err := c.Incr(ctx, plain[0]).Err(); err == nil {
		t.Fatal("INCR of text did not fail")
	}
	if s, f, rt, rf := rec.take("likes"); s != 41 || f != 0 || rt < 41 || rf != 0 {
		t.Fatalf("every master up: likes served %d failed %d, raw %d failed %d; want 41 0, at least 41 (the connection set-up too), 0", s, f, rt, rf)
	}
	// The reads among them: likes' GET (its INCRs write), the 40 direct
	// GETs (not the INCR of text, nor the connection's set-up).
	if r := rec.takeReads(); r != [4]int{1, 0, 40, 0} {
		t.Fatalf("every master up: reads %v, want likes' 1 served, none failed, 40 direct, none failed", r)
	}

	// Stopped, not paused: go-redis (9.23, RESP3) waits for a paused
	// node's reply past its context's deadline (it peeks for push
	// notifications before reading the reply), so a paused place holds a
	// command until the pause ends. A stopped node refuses at once. The
	// rounds end well before the cluster marks it failed (node timeout
	// 5 s) and answers CLUSTERDOWN everywhere.
	stop := func(addr string) {
		for _, srv := range cl.Servers {
			if srv.Addr == addr {
				srv.Stop()
			}
		}
	}
	// After the stop the split's reads fail (they need every shard); its
	// INCRs would not (an increment whose shard's node is down goes to
	// another place of the counter: test/clients
	// TestFailingSplitPathRolledBack), so none is sent.
	stop(stopped)
	round(20, false)
	s, f, rt, rf := rec.take("likes")
	t.Logf("a shard's master stopped: likes served %d failed %d, raw %d failed %d", s, f, rt, rf)
	if s != 1 || f != 1 || rt < 20 || rf != 0 {
		t.Fatalf("a shard's master stopped: likes served %d failed %d, raw %d failed %d; want its GET served and failed, 20 raw, none failed", s, f, rt, rf)
	}
	if r := rec.takeReads(); r != [4]int{1, 1, 20, 0} {
		t.Fatalf("a shard's master stopped: reads %v, want likes' GET served and failed, the 20 direct GETs, none failed", r)
	}

	for _, a := range cl.Addrs() {
		stop(a)
	}
	round(5, true)
	s, f, rt, rf = rec.take("likes")
	t.Logf("every master stopped: likes served %d failed %d, raw %d failed %d", s, f, rt, rf)
	if s != 6 || f != 6 || rt < 5 || rf < 5 {
		t.Fatalf("every master stopped: likes served %d failed %d, raw %d failed %d; want all failed on both paths", s, f, rt, rf)
	}
}
