package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// serve runs one command through the engine as the proxy does: Decide,
// then Serve, or raw to Redis where the engine sends it raw.
func serve(t *testing.T, e *engine.Engine, c redis.UniversalClient, args ...string) engine.Reply {
	t.Helper()
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	d := e.Decide(b, false)
	if d.Class == engine.ClassNone || d.Op == engine.OpRaw {
		t.Fatalf("%q: the engine does not serve it (op %v)", args, d.Op)
	}
	r, _ := e.Serve(context.Background(), d, b, nil, nil)
	return r
}

// TestZSetSplitByMemberRelievesMasters is issue 33's relief target for a
// write-hot leaderboard on a real 3-master cluster, with the leaderboard's
// mix (two ZINCRBY per top-5 read, ZREVRANGE 0 4 WITHSCORES): on a plain
// sorted set its master takes every command (busiest ÷ mean 3); split by
// member in 6 shards, the commands every master served (ZINCRBY to the
// shards, the score reads a member's first write makes, and the top-5
// reads of every place) are within 1.2 of the mean. Every score read back
// through the engine is the increments sent, and its top-N equals that of
// the plain sorted set the same increments went to.
func TestZSetSplitByMemberRelievesMasters(t *testing.T) {
	tg := targets(t)[1]
	ctx := context.Background()
	const (
		members = 200
		workers = 8
		each    = 750
	)
	plain := key(t, "plain")
	split := key(t, "split")
	en := routing.Entry{Key: split, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 6}}, Members: true, Kind: routing.KindZSet}}
	clean(t, tg.client, en)
	tg.client.Del(ctx, plain)
	e := newEngine(t, tg.client, engine.Options{})
	e.SetTable(table(en))
	// incr is member m's i-th increment: uneven, so the top-N means
	// something.
	incr := func(m int) int { return m%7 + 1 }
	ratio := func(k string) float64 {
		tg.resetStats(t)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					m := (w*each + i) % members
					ops := [][]string{{"ZINCRBY", k, fmt.Sprint(incr(m)), fmt.Sprintf("p%d", m)}}
					if i%2 == 1 {
						ops = append(ops, []string{"ZREVRANGE", k, "0", "4", "WITHSCORES"})
					}
					for _, op := range ops {
						args := make([][]byte, len(op))
						for j, a := range op {
							args[j] = []byte(a)
						}
						d := e.Decide(args, false)
						if d.Class == engine.ClassNone {
							if err := tg.client.Do(ctx, anys(op)...).Err(); err != nil {
								t.Error(err)
								return
							}
							continue
						}
						if r, _ := e.Serve(ctx, d, args, nil, nil); r.Kind == engine.ReplyError {
							t.Errorf("%q: %v", op, r.Err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		per := make([]int64, len(tg.nodes))
		for _, cmd := range []string{"zincrby", "zscore", "zrevrange", "zrange", "zmscore"} {
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
		t.Errorf("plain sorted set: busiest ÷ mean %.2f, want 3 (one master)", r)
	}
	if r := ratio(split); r > 1.2 {
		t.Errorf("sorted set split by member: busiest ÷ mean %.2f, want ≤ 1.2", r)
	}
	per := workers * each / members
	for m := range members {
		r := serve(t, e, tg.client, "ZSCORE", split, fmt.Sprintf("p%d", m))
		if want := fmt.Sprint(per * incr(m)); string(r.Bulk) != want {
			t.Errorf("ZSCORE p%d = %+v, want %s", m, r, want)
		}
	}
	compareZReads(t, e, tg.client, split, plain)
}

// compareZReads checks every read a sorted set split by member serves
// against Redis' own answer on a plain sorted set holding the same
// scores.
func compareZReads(t *testing.T, e *engine.Engine, c redis.UniversalClient, split, plain string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range [][]string{
		{"ZREVRANGE", "0", "4", "WITHSCORES"}, {"ZREVRANGE", "3", "12"}, {"ZRANGE", "0", "9", "WITHSCORES"},
		{"ZRANGE", "0", "9", "REV", "WITHSCORES"}, {"ZRANGE", "-5", "-1", "WITHSCORES"}, {"ZREVRANGE", "0", "-1"},
		{"ZRANGE", "5", "2"}, {"ZCARD"}, {"ZRANK", "p3"}, {"ZREVRANK", "p3"}, {"ZRANK", "nobody"},
		{"ZMSCORE", "p1", "nobody", "p2"}, {"ZSCORE", "nobody"},
	} {
		args := append([]string{q[0], split}, q[1:]...)
		got := flat(serve(t, e, c, args...))
		want, err := c.Do(ctx, anys(append([]string{q[0], plain}, q[1:]...))...).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if w := fmt.Sprint(want); got != w {
			t.Errorf("%q: split %s, plain %s", q, got, w)
		}
	}
}

// flat prints a reply as go-redis' Do prints Redis' own RESP3 reply.
func flat(r engine.Reply) string {
	switch r.Kind {
	case engine.ReplyNil:
		return "<nil>"
	case engine.ReplyInt:
		return fmt.Sprint(r.Int)
	case engine.ReplyBulk, engine.ReplyDouble:
		return string(r.Bulk)
	case engine.ReplyError:
		return r.Err.Error()
	case engine.ReplyScored:
		var out []any
		for i := 0; i+1 < len(r.Elems); i += 2 {
			out = append(out, []any{string(r.Elems[i].Bulk), string(r.Elems[i+1].Bulk)})
		}
		return fmt.Sprint(out)
	}
	out := make([]any, len(r.Elems))
	for i, el := range r.Elems {
		out[i] = flat(el)
	}
	if len(out) == 0 {
		return "[]"
	}
	return fmt.Sprint(out)
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// TestZTopExactOverLayouts: sorted sets spread over the base key and two
// generations (4 and 6 shards, each member on its own shard of each, as
// writes and folds leave them), with small integer scores of both signs
// so that ties straddle every rank, read by ZRANGE and ZREVRANGE of every
// top-N through the engine: each equals Redis' own reply for one plain
// sorted set holding the members' summed scores.
func TestZTopExactOverLayouts(t *testing.T) {
	tg := targets(t)[0]
	ctx := context.Background()
	gens := []routing.Generation{{FromEpoch: 0, Shards: 4}, {FromEpoch: 1, Shards: 6}}
	for seed := range 12 {
		split, plain := key(t, fmt.Sprintf("split%d", seed)), key(t, fmt.Sprintf("plain%d", seed))
		en := routing.Entry{Key: split, Split: &routing.Split{Generations: gens, Members: true, Kind: routing.KindZSet}}
		clean(t, tg.client, en)
		tg.client.Del(ctx, plain)
		e := newEngine(t, tg.client, engine.Options{})
		e.SetTable(table(en))
		places := func(m string) []string {
			return []string{split, routing.ShardKeys(split, gens[0])[routing.MemberShard(m, 4)], routing.ShardKeys(split, gens[1])[routing.MemberShard(m, 6)]}
		}
		members := 5 + seed*4
		for i := range members {
			m := fmt.Sprintf("m%02d", (i*7+seed)%members)
			for j, p := range places(m) {
				h := (i*131 + j*71 + seed*29) % 97
				if h%4 == 0 {
					continue // not in this place
				}
				v := float64(h%9 - 2)
				must(t, tg.client.ZIncrBy(ctx, p, v, m).Err())
				must(t, tg.client.ZIncrBy(ctx, plain, v, m).Err())
			}
		}
		for _, n := range []int{1, 2, 3, 5, 8, members} {
			for _, cmd := range []string{"ZRANGE", "ZREVRANGE"} {
				got := flat(serve(t, e, tg.client, cmd, split, "0", fmt.Sprint(n-1), "WITHSCORES"))
				want, err := tg.client.Do(ctx, cmd, plain, 0, n-1, "WITHSCORES").Result()
				if err != nil {
					t.Fatal(err)
				}
				if w := fmt.Sprint(want); got != w {
					t.Errorf("seed %d: %s 0 %d: split %s, plain %s", seed, cmd, n-1, got, w)
				}
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
