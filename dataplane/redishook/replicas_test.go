package redishook_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestHookReplicaReads: an application's own go-redis client with the
// hook reads a replicaReads key from the replicas the table lists, as the
// sidecar does: its GETs reach the replicas, none the master, and a write
// through the same client is read back at once, even from behind a replica
// that stopped applying them.
func TestHookReplicaReads(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	r := redistest.Replicated(t, 2)
	ctx := context.Background()
	app := redis.NewClient(&redis.Options{Addr: r.Master.Addr})
	defer app.Close()
	e := engine.New(app, engine.Options{})
	defer e.Close()
	app.AddHook(redishook.New(e))
	e.SetTable(&routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60_000,
		Replicas: &routing.ReplicaSettings{Addresses: r.ReplicaAddrs(), CheckMillis: 100},
		Entries:  []routing.Entry{{Key: "hot", Source: routing.SourceDetected, ReplicaReads: &routing.ReplicaReads{MaxLagMillis: 1000}}}})
	// Written around the hook: a write through it would send the key's
	// reads to the master until a lag check shows the replicas hold it
	// (read your writes), tested below.
	direct := redis.NewClient(&redis.Options{Addr: r.Master.Addr})
	defer direct.Close()
	if err := direct.Set(ctx, "hot", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "both replicas usable", func() bool {
		n := 0
		for _, l := range e.ReplicaLags() {
			if l >= 0 && l <= time.Second {
				n++
			}
		}
		return n == 2
	})
	// Both replicas hold the write before the reads start.
	eventually.True(t, 10*time.Second, "the replicas have the value", func() bool {
		for _, a := range r.ReplicaAddrs() {
			c := redis.NewClient(&redis.Options{Addr: a})
			v := c.Get(ctx, "hot").Val()
			c.Close()
			if v != "v" {
				return false
			}
		}
		return true
	})
	nodes := append([]string{r.Master.Addr}, r.ReplicaAddrs()...)
	for _, a := range nodes {
		c := redis.NewClient(&redis.Options{Addr: a})
		c.ConfigResetStat(ctx)
		c.Close()
	}
	for i := 0; i < 100; i++ {
		if v, err := app.Get(ctx, "hot").Result(); err != nil || v != "v" {
			t.Fatalf("read %d: %q, %v", i, v, err)
		}
	}
	calls := make([]int, len(nodes))
	for i, a := range nodes {
		c := redis.NewClient(&redis.Options{Addr: a})
		info := c.Info(ctx, "commandstats").Val()
		c.Close()
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
				calls[i], _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			}
		}
	}
	if calls[0] != 0 || calls[1]+calls[2] != 100 || calls[1] < 25 || calls[2] < 25 {
		t.Fatalf("GETs on master, replica, replica = %v; want 0 and an even split of 100", calls)
	}

	// The application reads its own writes even from behind a replica
	// that stopped applying them (and is still within the lag bound).
	r1 := r.ReplicaAddrs()[0]
	p1 := redis.NewClient(&redis.Options{Addr: r1})
	defer p1.Close()
	if err := p1.Do(ctx, "CLIENT", "PAUSE", 20000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer p1.Do(ctx, "CLIENT", "UNPAUSE")
	for i := 0; i < 20; i++ {
		val := "w" + strconv.Itoa(i)
		if err := app.Set(ctx, "hot", val, 0).Err(); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 5; j++ {
			if v, err := app.Get(ctx, "hot").Result(); err != nil || v != val {
				t.Fatalf("write %d, read %d: %q, %v; want %q", i, j, v, err, val)
			}
		}
	}
}
