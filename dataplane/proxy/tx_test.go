package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// execAbort is Redis' reply to the EXEC of a transaction with a command
// refused at queue time.
const execAbort = "EXECABORT Transaction discarded because of previous errors."

// TestTxWithRefusedCommandAborts: through the sidecar (event loop and
// sessions, in front of a standalone redis-server and of a 3-master
// cluster), a go-redis TxPipeline in its default configuration holding a
// command the sidecar refuses inside MULTI (APPEND on a split counter,
// first or after another command; a shed key's INCR over its share) gets
// what Redis answers for a command refused at queue time: the command
// gets its refusal, EXEC answers EXECABORT, nothing of the transaction is
// applied, at once (not at the client's read timeout, as when EXEC
// answered fewer replies than the client queued), and the same connection
// serves the next command outside any transaction. A WATCH before it is
// released, as Redis' EXECABORT releases it.
func TestTxWithRefusedCommandAborts(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	cl := redistest.Cluster(t)
	for _, up := range []struct {
		name    string
		cluster bool
		addrs   []string
	}{{"standalone", false, []string{srv.Addr}}, {"cluster", true, cl.Addrs()}} {
		for _, noLoop := range []bool{false, true} {
			name := up.name + "/event loop"
			if noLoop {
				name = up.name + "/sessions"
			}
			t.Run(name, func(t *testing.T) {
				var direct redis.UniversalClient
				if up.cluster {
					direct = redis.NewClusterClient(&redis.ClusterOptions{Addrs: up.addrs})
				} else {
					direct = redis.NewClient(&redis.Options{Addr: up.addrs[0]})
				}
				defer direct.Close()
				checkTxRefused(t, direct, proxy.Config{Upstreams: up.addrs[:1], Cluster: up.cluster, NoEventLoop: noLoop})
			})
		}
	}
}

func checkTxRefused(t *testing.T, direct redis.UniversalClient, cfg proxy.Config) {
	ctx := context.Background()
	// One hash tag: in a cluster every key of the transaction is in one slot.
	const ctr, shed, other, watched = "{tx}ctr", "{tx}shed", "{tx}other", "{tx}watched"
	for _, k := range []string{ctr, shed, other, watched} {
		must(t, direct.Del(ctx, k).Err())
	}
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	eng := engine.New(direct, engine.Options{Clock: clk})
	defer eng.Close()
	eng.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
		{Key: ctr, Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}},
		{Key: shed, Source: routing.SourceDetected, Shed: &routing.Shed{WritesPerSecond: 1, MinPerSecond: 1}},
	}})
	cfg.Engine = eng
	addr, _ := start(t, cfg)
	c := redis.NewClient(&redis.Options{Addr: addr}) // go-redis' defaults: MaxRetries 3, ReadTimeout 3s
	defer c.Close()
	// The clock stands still: the shed key's first write takes its only
	// token, and every later one is over its share.
	must(t, c.Incr(ctx, shed).Err())

	splitRefusal := "ERR heatsink: APPEND on a key mitigated by split is not supported inside MULTI"
	for _, tc := range []struct {
		name    string
		watch   bool
		queue   func(p redis.Pipeliner)
		refused int    // the index of the refused command
		want    string // its error
	}{
		{name: "refused after another command", queue: func(p redis.Pipeliner) {
			p.Incr(ctx, other)
			p.Append(ctx, ctr, "x")
			p.Incr(ctx, other)
		}, refused: 1, want: splitRefusal},
		{name: "refused first", queue: func(p redis.Pipeliner) {
			p.Append(ctx, ctr, "x")
			p.Incr(ctx, other)
		}, refused: 0, want: splitRefusal},
		{name: "shed over its share", queue: func(p redis.Pipeliner) {
			p.Incr(ctx, other)
			p.Incr(ctx, shed)
		}, refused: 1, want: routing.ShedError},
		{name: "watched", watch: true, queue: func(p redis.Pipeliner) {
			p.Incr(ctx, other)
			p.Append(ctx, ctr, "x")
		}, refused: 1, want: splitRefusal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := c.Conn() // one connection: it must stay usable
			defer conn.Close()
			if tc.watch {
				must(t, conn.Do(ctx, "WATCH", watched).Err())
			}
			var cmds []redis.Cmder
			began := time.Now()
			cmds, err := conn.TxPipelined(ctx, func(p redis.Pipeliner) error { tc.queue(p); return nil })
			took := time.Since(began)
			if err == nil || !strings.HasPrefix(err.Error(), execAbort) {
				t.Fatalf("EXEC of a transaction with a refused command: %v (after %v), want %q", err, took, execAbort)
			}
			if took > time.Second {
				t.Errorf("the transaction took %v to fail: the client waited for replies", took)
			}
			if got := cmds[tc.refused].Err(); got == nil || got.Error() != tc.want {
				t.Errorf("the refused command got %v, want %q", got, tc.want)
			}
			for _, k := range []string{other, ctr} {
				if n, err := direct.Exists(ctx, k).Result(); err != nil || n != 0 {
					t.Errorf("%s exists (%d, %v) after an aborted transaction: some of it ran", k, n, err)
				}
			}
			if v, _ := direct.Get(ctx, shed).Int(); v != 1 {
				t.Errorf("%s = %d, want the 1 write admitted before the transaction", shed, v)
			}
			if tc.watch {
				// EXECABORT released the WATCH: another client's write
				// does not fail this connection's next transaction.
				must(t, direct.Set(ctx, watched, "changed", 0).Err())
				if _, err := conn.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, watched); return nil }); err != nil {
					t.Errorf("a transaction after the aborted watched one: %v, want it run (the WATCH released)", err)
				}
			}
			// The connection is outside any transaction: INCR answers its
			// value, not QUEUED.
			if v, err := conn.Incr(ctx, other).Result(); err != nil || v != 1 {
				t.Fatalf("INCR on the same connection after the abort: %d, %v; want 1", v, err)
			}
			must(t, direct.Del(ctx, other).Err())
		})
	}
}
