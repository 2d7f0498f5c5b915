package proxy_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// famRecorder is a FamilyObserver keeping counts and families per key.
type famRecorder struct {
	recorder
	fmu  sync.Mutex
	fams map[string]routing.Families
}

func (r *famRecorder) ObserveFamilies(policy, key string, f routing.Families) {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	r.fams[policy+"|"+key] |= f
}

// TestRefusedCommandsCountAndReportFamilies: a command the engine refuses
// on a mitigated key (LPUSH and, inside MULTI, INCR on a split counter) is
// still counted as demand of the key, and its family reported, so the
// manager sees what the key's clients send and the key does not cool down
// for having its commands refused (before, a refused command was not
// counted: the key was released at the cooldown and split again).
func TestRefusedCommandsCountAndReportFamilies(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(mitigatedTable())
	rec := &famRecorder{recorder: recorder{m: map[string][3]uint32{}}, fams: map[string]routing.Families{}}
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng, Observer: rec, Policy: "ns/p"})
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	for range 3 {
		if err := c.LPush(ctx, "likes", "job").Err(); err == nil {
			t.Fatal("LPUSH on a split counter was not refused")
		}
	}
	if err := c.Incr(ctx, "likes").Err(); err != nil {
		t.Fatal(err)
	}
	_, _ = c.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Incr(ctx, "likes"); return nil })
	rec.mu.Lock()
	got := rec.m["ns/p|likes"]
	rec.mu.Unlock()
	rec.fmu.Lock()
	fams := rec.fams["ns/p|likes"]
	rec.fmu.Unlock()
	// 3 refused LPUSH, 1 INCR served split, 1 INCR refused inside MULTI.
	if got[1] != 5 {
		t.Errorf("writes counted for the split key: %d, want 5 (refused ones included)", got[1])
	}
	if want := routing.FamOrdered | routing.FamCounter | routing.FamTx; fams != want {
		t.Errorf("families reported: %v, want %v", fams, want)
	}
	if d := cmp.Diff(routing.Families(0), rec.fams["ns/p|hot"]); d != "" {
		t.Errorf("families of a key never sent: %s", d)
	}
}
