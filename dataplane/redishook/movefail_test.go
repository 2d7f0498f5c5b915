package redishook_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// outcomes is an observer counting what the hook reports of the commands
// moves served and of those sent raw.
type outcomes struct {
	obsRecorder
	mu                                  sync.Mutex
	served, failed, rawTotal, rawFailed int
}

func (o *outcomes) ObserveMoved(policy, key string, read, failed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.served++
	if failed {
		o.failed++
	}
}

func (o *outcomes) ObserveRaw(policy string, read, failed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rawTotal++
	if failed {
		o.rawFailed++
	}
}

// TestHookReportsMoveFailuresWithBaseline: the go-redis hook reports the
// outcomes as the sidecar does. In a real 3-master cluster, with a split
// counter some of whose shards live on a master that is stopped, its GET
// through the hook (a read of every shard) is reported as served by the
// move and failed, and the GETs of keys on the other masters, sent raw, as
// the baseline, none failed (a nil reply is no failure). Its INCRs would
// not fail: an increment whose shard's node is down goes to another place
// of the counter (test/clients TestFailingSplitPathRolledBack).
func TestHookReportsMoveFailuresWithBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	cl := redistest.Cluster(t)
	ctx := context.Background()
	app := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer app.Close()
	e := engine.New(app, engine.Options{})
	defer e.Close()
	rec := &outcomes{}
	app.AddHook(redishook.New(e, redishook.WithObserver(rec, "ns/p")))
	e.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60_000,
		Entries: []routing.Entry{{Key: "likes", Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}}}})
	nodeOf := func(key string) string {
		n, err := app.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	stopped := nodeOf(routing.ShardKey("likes", 0, 0, 4))
	var plain []string
	for i := 0; len(plain) < 10; i++ {
		if k := fmt.Sprint("plain:", i); nodeOf(k) != stopped {
			plain = append(plain, k)
		}
	}
	// The masters still up serve their slots while one is down (else,
	// after the node timeout, every node answers CLUSTERDOWN: a whole
	// cluster failing, which fails the direct GETs too).
	for _, a := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: a})
		if err := c.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	for _, srv := range cl.Servers {
		if srv.Addr == stopped {
			srv.Stop()
		}
	}
	for i := range 40 {
		_ = app.Get(ctx, plain[i%len(plain)]).Err()
	}
	_ = app.Get(ctx, "likes").Err()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	t.Logf("a shard's master stopped: likes served %d failed %d, raw %d failed %d", rec.served, rec.failed, rec.rawTotal, rec.rawFailed)
	if rec.served != 1 || rec.failed != 1 || rec.rawTotal < 40 || rec.rawFailed != 0 {
		t.Fatalf("served %d failed %d, raw %d failed %d; want the GET of likes served and failed, 40 raw, none failed", rec.served, rec.failed, rec.rawTotal, rec.rawFailed)
	}
}
