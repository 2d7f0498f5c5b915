package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestHashSplitByFieldRelievesMasters is issue 33's relief target for a
// write-hot hash of counters on a real 3-master cluster: HINCRBY of 200
// fields through the engine, first on a plain hash (its master takes
// every write: busiest ÷ mean 3), then on one split by field in 6 shards,
// where the commands every master served (HINCRBY to the shards, and the
// reads of the base key each field's first write makes) are within 1.2 of
// the mean; and every field's value read back through the engine is
// exact.
func TestHashSplitByFieldRelievesMasters(t *testing.T) {
	tg := targets(t)[1]
	ctx := context.Background()
	const (
		fields  = 200
		workers = 8
		each    = 750
	)
	plain := key(t, "plain")
	split := key(t, "split")
	en := routing.Entry{Key: split, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 6}}, Members: true}}
	clean(t, tg.client, en)
	tg.client.Del(ctx, plain)
	e := newEngine(t, tg.client, engine.Options{})
	e.SetTable(table(en))
	ratio := func(k string) float64 {
		tg.resetStats(t)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					args := [][]byte{[]byte("HINCRBY"), []byte(k), []byte(fmt.Sprintf("f%d", (w*each+i)%fields)), []byte("1")}
					d := e.Decide(args, false)
					if d.Op == engine.OpRaw || d.Class == engine.ClassNone {
						if err := tg.client.HIncrBy(ctx, k, string(args[2]), 1).Err(); err != nil {
							t.Error(err)
							return
						}
						continue
					}
					if r, _ := e.Serve(ctx, d, args, nil, nil); r.Kind != engine.ReplyInt {
						t.Errorf("HINCRBY reply %+v", r)
						return
					}
				}
			}()
		}
		wg.Wait()
		per := make([]int64, len(tg.nodes))
		for _, cmd := range []string{"hincrby", "hmget"} {
			for i, n := range tg.perNode(t, cmd) {
				per[i] += n
			}
		}
		var sum int64
		for _, n := range per {
			sum += n
		}
		r := float64(slices.Max(per)) / (float64(sum) / float64(len(per)))
		t.Logf("%s: commands per master %v, busiest ÷ mean %.2f", k, per, r)
		return r
	}
	if r := ratio(plain); r < 2.9 {
		t.Errorf("plain hash: busiest ÷ mean %.2f, want 3 (one master)", r)
	}
	if r := ratio(split); r > 1.2 {
		t.Errorf("hash split by field: busiest ÷ mean %.2f, want ≤ 1.2", r)
	}
	want := workers * each / fields
	for i := range fields {
		f := fmt.Sprintf("f%d", i)
		args := [][]byte{[]byte("HGET"), []byte(split), []byte(f)}
		r, _ := e.Serve(ctx, e.Decide(args, false), args, nil, nil)
		if string(r.Bulk) != fmt.Sprint(want) {
			t.Errorf("HGET %s = %+v, want %d", f, r, want)
		}
	}
}
