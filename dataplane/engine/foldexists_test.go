package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/controllers/fold"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestExistsDuringTheFirstFold: a hash split by field whose fields all
// sit in a retired generation's shards (K does not exist yet) is folded
// while two readers ask EXISTS, TYPE and TTL of it through the engine; the
// key exists throughout, so every reply must say so. A fold's first move
// creates K (the credit) and then empties a shard (the debit); a read
// whose K was read before the credit and whose shard after the debit found
// no place on the previous code. Repeated over fresh keys on the 3-master
// cluster, where K and the shards are on different nodes.
func TestExistsDuringTheFirstFold(t *testing.T) {
	tg := targets(t)[1]
	ctx := context.Background()
	old := routing.Generation{FromEpoch: 0, Shards: 3}
	split := func(gens ...routing.Generation) *routing.Split {
		return &routing.Split{Generations: gens, Members: true}
	}
	now := split(old, routing.Generation{FromEpoch: 1, Shards: 4})
	folder := fold.New(tg.client, fold.Options{})
	end := time.Now().Add(3 * time.Second)
	var reads, wrong atomic.Int64
	var example atomic.Value
	keys := 0
	for ; keys < 400 && time.Now().Before(end); keys++ {
		k := key(t, fmt.Sprint("fx", keys, time.Now().UnixNano()))
		eLate := newEngine(t, tg.client, engine.Options{})
		eLate.SetTable(table(routing.Entry{Key: k, Source: routing.SourceDetected, Split: split(old)}))
		for _, f := range []string{"a", "b", "c", "d", "e", "f"} {
			if _, err := eLate.HIncrBy(ctx, k, f, 1); err != nil {
				t.Fatal(err)
			}
		}
		e := newEngine(t, tg.client, engine.Options{})
		e.SetTable(table(routing.Entry{Key: k, Source: routing.SourceDetected, Split: now}))
		var done atomic.Bool
		var wg sync.WaitGroup
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := g; n < 1000 && !done.Load(); n++ {
					var args []string
					var want string
					switch n % 3 {
					case 0:
						args, want = []string{"EXISTS", k}, "1"
					case 1:
						args, want = []string{"TYPE", k}, "hash"
					default:
						args, want = []string{"TTL", k}, "-1"
					}
					r := serve(t, e, tg.client, args...)
					reads.Add(1)
					var got string
					switch r.Kind {
					case engine.ReplyInt:
						got = fmt.Sprint(r.Int)
					case engine.ReplyStatus:
						got = r.Str
					case engine.ReplyError:
						got = r.Err.Error()
					default:
						got = string(r.Bulk)
					}
					if got != want {
						wrong.Add(1)
						example.CompareAndSwap(nil, fmt.Sprintf("%v answered %q, want %q", args, got, want))
					}
				}
			}()
		}
		if _, err := folder.Split(ctx, k, now, old); err != nil {
			t.Fatal(err)
		}
		done.Store(true)
		wg.Wait()
	}
	t.Logf("%d keys folded, %d EXISTS/TYPE/TTL reads during their folds, %d wrong", keys, reads.Load(), wrong.Load())
	if wrong.Load() > 0 {
		t.Fatalf("%d of %d reads said a key that existed throughout did not; first: %v", wrong.Load(), reads.Load(), example.Load())
	}
}
