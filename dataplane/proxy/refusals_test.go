package proxy_test

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// refusalRecorder is a RefusalObserver counting refusals per key.
type refusalRecorder struct {
	famRecorder
	rmu     sync.Mutex
	refused map[string]int
}

func (r *refusalRecorder) ObserveRefused(policy, key string) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	r.refused[policy+"|"+key]++
}

// TestRefusalsBecauseOfAMoveReported: each command the engine refuses
// because of its key's move (LPUSH on a split counter, INCR of it inside
// MULTI, APPEND on a replicated key) is reported once under the mitigated
// key, and nothing else is: not the commands served (INCR split, GET),
// not Redis' own errors (INCR of a plain key holding text). The manager
// rolls a move back by these counts.
func TestRefusalsBecauseOfAMoveReported(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(mitigatedTable())
	rec := &refusalRecorder{famRecorder: famRecorder{recorder: recorder{m: map[string][3]uint32{}}, fams: map[string]routing.Families{}},
		refused: map[string]int{}}
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
	if err := c.Append(ctx, "page", "x").Err(); err == nil {
		t.Fatal("APPEND on a replicated key was not refused")
	}
	if err := direct.Set(ctx, "plain", "text", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Incr(ctx, "plain").Err(); err == nil {
		t.Fatal("INCR of text did not fail")
	}
	rec.rmu.Lock()
	defer rec.rmu.Unlock()
	want := map[string]int{"ns/p|likes": 4, "ns/p|page": 1}
	if len(rec.refused) != len(want) || rec.refused["ns/p|likes"] != 4 || rec.refused["ns/p|page"] != 1 {
		t.Errorf("refusals reported %v, want %v", rec.refused, want)
	}
}
