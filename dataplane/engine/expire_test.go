package engine_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestSplitExpiryUnderConcurrentWriters: three processes (engines) at once
// set a split counter's expiry to different values (EXPIRE, PEXPIRE GT,
// PERSIST) and INCR it, creating its shards, against real Redis
// (standalone and a 3-master cluster). Once they stop, every physical key
// that exists carries the base key's expiry, and the counter is exact.
func TestSplitExpiryUnderConcurrentWriters(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, "limit")
			en := routing.Entry{Key: k, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 8}}}}
			clean(t, tg.client, en)
			var engines []*engine.Engine
			for range 3 {
				e := newEngine(t, tg.client, engine.Options{})
				e.SetTable(table(en))
				engines = append(engines, e)
			}
			serve := func(e *engine.Engine, args ...string) engine.Reply {
				b := make([][]byte, len(args))
				for i, a := range args {
					b[i] = []byte(a)
				}
				r, ok := e.Serve(ctx, e.Decide(b, false), b, nil, nil)
				if !ok {
					t.Errorf("%v: not served", args)
				}
				return r
			}
			const each = 150
			var wg sync.WaitGroup
			for p, e := range engines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						var r engine.Reply
						switch (i + p) % 5 {
						case 0:
							r = serve(e, "EXPIRE", k, strconv.Itoa(100+p*100+i))
						case 1:
							r = serve(e, "PEXPIRE", k, strconv.Itoa((400+i)*1000), "GT")
						case 2:
							if i%20 == 2 {
								r = serve(e, "PERSIST", k)
								break
							}
							fallthrough
						default:
							r = serve(e, "INCR", k)
						}
						if r.Kind != engine.ReplyInt {
							t.Errorf("reply %+v", r)
							return
						}
					}
				}()
			}
			wg.Wait()
			keys := []string{k}
			keys = append(keys, routing.ShardKeys(k, en.Split.Generations[0])...)
			base := tg.client.Do(ctx, "pexpiretime", k).Val()
			existing := 0
			for _, pk := range keys {
				at := tg.client.Do(ctx, "pexpiretime", pk).Val()
				if at == int64(-2) {
					continue
				}
				existing++
				if at != base {
					t.Errorf("%s expires at %v, the base key at %v", pk, at, base)
				}
			}
			if existing < 8 {
				t.Fatalf("only %d of the 9 physical keys exist", existing)
			}
			v, _, err := engines[0].Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if got := rawSum(t, tg.client, en); fmt.Sprint(got) != string(v) {
				t.Fatalf("GET %s, the keys hold %d", v, got)
			}
			t.Logf("base key's PEXPIRETIME at the end: %v", base)
		})
	}
}
