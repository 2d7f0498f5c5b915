package redishook_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/counts"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/proxytest"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// node agent is a UDP socket standing for the node's agent: it decodes
// the batches a counts.Client sends and adds them up per key.
type nodeAgent struct {
	conn *net.UDPConn
}

func newNodeAgent(t *testing.T) *nodeAgent {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &nodeAgent{conn: c}
}

func (d *nodeAgent) addr() string { return d.conn.LocalAddr().String() }

type keyCounts struct{ Reads, Writes, Bytes, Refused uint32 }

// received reads every batch until none comes for 300 ms (the sender has
// been flushed before) and sums them per "policy|key".
func (d *nodeAgent) received(t *testing.T) map[string]keyCounts {
	t.Helper()
	out := map[string]keyCounts{}
	buf := make([]byte, 64<<10)
	var dec sidecarlink.Decoder
	for {
		d.conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := d.conn.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return out
			}
			t.Fatal(err)
		}
		b, err := dec.Decode(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.Entries {
			k := string(b.Policy) + "|" + string(e.Key)
			c := out[k]
			out[k] = keyCounts{c.Reads + e.Reads, c.Writes + e.Writes, c.Bytes + e.Bytes, c.Refused + e.Refused}
		}
	}
}

// reportScript reads and writes plain and mitigated keys, in single
// commands, a pipeline and a multi-key command; no reply is nil (whose
// size depends on the protocol the hook cannot see).
func reportScript(ctx context.Context, c redis.UniversalClient) {
	c.Set(ctx, "r:plain", "value", 0)
	c.Get(ctx, "r:plain")
	c.Get(ctx, "r:plain")
	c.Incr(ctx, "r:counter")
	c.IncrBy(ctx, "r:counter", 5)
	c.Get(ctx, "r:counter")
	c.Set(ctx, "r:cached", "hot", 0)
	for range 3 {
		c.Get(ctx, "r:cached")
	}
	c.HSet(ctx, "r:hash", "f", "v")
	c.HGet(ctx, "r:hash", "f")
	c.LPush(ctx, "r:list", "a", "b")
	c.LRange(ctx, "r:list", 0, -1)
	c.MGet(ctx, "r:plain", "r:cached")
	c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "r:plain")
		p.Incr(ctx, "r:counter")
		p.Append(ctx, "r:plain", "!")
		p.Append(ctx, "r:counter", "!") // refused: the split serves no APPEND
		return nil
	})
	c.LPush(ctx, "r:counter", "x") // refused too
	c.Ping(ctx)
}

// TestHookReportsLikeTheSidecar plays the same commands through the
// sidecar proxy and through the go-redis hook, each reporting to a
// node agent with the same client (counts.Client): the node agent must receive
// the same reads, writes and bytes per key from both. Before, an
// application using only the hook reported nothing.
func TestHookReportsLikeTheSidecar(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	ctx := context.Background()
	table := &routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: []routing.Entry{
		{Key: "r:cached", Source: routing.SourceDetected, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60_000}},
		{Key: "r:counter", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}},
	}}
	const policy = "ns/p"

	// Through the sidecar.
	s1 := redistest.Standalone(t)
	d1 := newNodeAgent(t)
	w1, err := counts.NewClient(d1.addr(), counts.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	ec := redis.NewClient(&redis.Options{Addr: s1.Addr})
	defer ec.Close()
	pe := engine.New(ec, engine.Options{})
	defer pe.Close()
	pe.SetTable(table)
	paddr, _ := proxytest.Start(t, proxy.Config{Upstreams: []string{s1.Addr}, Engine: pe, Observer: w1, Policy: policy})
	pc := redis.NewClient(&redis.Options{Addr: paddr})
	defer pc.Close()
	reportScript(ctx, pc)
	w1.Flush()
	viaSidecar := d1.received(t)

	// Through the hook.
	s2 := redistest.Standalone(t)
	d2 := newNodeAgent(t)
	w2, err := counts.NewClient(d2.addr(), counts.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	app := redis.NewClient(&redis.Options{Addr: s2.Addr})
	defer app.Close()
	he := engine.New(app, engine.Options{})
	defer he.Close()
	he.SetTable(table)
	app.AddHook(redishook.New(he, redishook.WithObserver(w2, policy)))
	reportScript(ctx, app)
	w2.Flush()
	viaHook := d2.received(t)

	if len(viaSidecar) == 0 {
		t.Fatal("the sidecar reported nothing")
	}
	if n := viaSidecar[policy+"|r:counter"].Refused; n != 2 {
		t.Errorf("the sidecar reported %d refusals of the split counter, want 2", n)
	}
	if diff := cmp.Diff(viaSidecar, viaHook); diff != "" {
		t.Errorf("the node agent hears different accesses from the hook (-sidecar +hook):\n%s", diff)
	}
}

// TestHookAppliesTableTracking: the table's localCache.tracking takes
// effect in the hook too (before, only engine.Options could turn it on, so
// the policy's setting never did): a write made directly to Redis reaches
// the hook's cached reads within a network delay, not at the end of the
// 60 s TTL.
func TestHookAppliesTableTracking(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			const key = "{trk}:hot"
			e := engine.New(tg.app, engine.Options{})
			defer e.Close()
			tg.app.AddHook(redishook.New(e))
			e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000,
				LocalCache: &routing.CacheSettings{Tracking: true},
				Entries:    []routing.Entry{{Key: key, Source: routing.SourceDetected, LocalCache: &routing.LocalCache{TTLMillis: 60_000}}}})
			if !e.Tracking() {
				t.Fatal("the table's localCache.tracking did not turn tracking on")
			}
			if err := tg.direct.Set(ctx, key, "old", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v := tg.app.Get(ctx, key).Val(); v != "old" {
				t.Fatalf("GET = %q", v)
			}
			if err := tg.direct.Set(ctx, key, "new", 0).Err(); err != nil {
				t.Fatal(err)
			}
			eventually.True(t, 5*time.Second, "the outside write invalidates the hook's cache", func() bool {
				return tg.app.Get(ctx, key).Val() == "new"
			})
			// A table without tracking turns it off again.
			e.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersion, Version: 2, EpochMillis: 60_000,
				Entries: []routing.Entry{{Key: key, Source: routing.SourceDetected, LocalCache: &routing.LocalCache{TTLMillis: 60_000}}}})
			if e.Tracking() {
				t.Fatal("tracking still on after a table without it")
			}
		})
	}
}
