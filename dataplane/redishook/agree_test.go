package redishook_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/redishook"
	"github.com/heatsink-dev/heatsink/internal/testing/proxytest"
	"github.com/heatsink-dev/heatsink/routing"
)

// agreeTable mitigates one key of each class; the keys are spread over
// slots on purpose, so multi-key commands span nodes in a cluster.
func agreeTable() *routing.Table {
	return &routing.Table{SchemaVersion: routing.SchemaVersion, Version: 1, EpochMillis: 60_000, Entries: []routing.Entry{
		{Key: "agree:cached", Source: routing.SourceDetected, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60_000}},
		{Key: "agree:counter", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}},
		{Key: "agree:replicated", Source: routing.SourceDetected, Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 60_000}},
	}}
}

// agreeScript drives every command engine.Serve implements, on mitigated
// and plain keys mixed, with the errors they can give.
var agreeScript = [][]any{
	{"SET", "agree:plain", "p"}, {"HSET", "agree:hash", "f", "v"},
	{"INCRBY", "agree:counter", 5}, {"INCR", "agree:counter"}, {"DECR", "agree:counter"}, {"DECRBY", "agree:counter", 2},
	{"INCRBY", "agree:counter", "x"},
	{"SET", "agree:replicated", "r1"}, {"SET", "agree:cached", "c1"},
	{"MGET", "agree:counter", "agree:plain", "agree:missing", "agree:replicated", "agree:hash", "agree:cached"},
	{"GET", "agree:counter"}, {"GETEX", "agree:replicated"}, {"STRLEN", "agree:counter"}, {"TYPE", "agree:counter"},
	{"EXISTS", "agree:counter", "agree:plain", "agree:missing", "agree:counter"},
	{"SETNX", "agree:replicated", "no"}, {"SETNX", "agree:fresh", "yes"},
	{"SETEX", "agree:replicated", 100, "r2"}, {"PSETEX", "agree:replicated", 100000, "r3"}, {"GET", "agree:replicated"},
	{"SET", "agree:replicated", "r4", "NX"}, {"SET", "agree:replicated", "r5", "XX"}, {"GET", "agree:replicated"},
	{"MSET", "agree:counter", "10", "agree:replicated", "r6", "agree:plain", "q"},
	{"MGET", "agree:counter", "agree:replicated", "agree:plain"},
	{"MSET", "agree:counter", "ten", "agree:plain", "never"}, {"GET", "agree:plain"},
	{"MSETNX", "agree:other", "1", "agree:replicated", "x"},
	{"APPEND", "agree:counter", "x"}, {"GETSET", "agree:replicated", "x"}, {"SET", "agree:replicated", "x", "GET"},
	{"EXPIRE", "agree:counter", 10}, {"APPEND", "agree:cached", "2"}, {"GET", "agree:cached"},
	{"DEL", "agree:counter", "agree:plain", "agree:missing"}, {"UNLINK", "agree:replicated", "agree:fresh"},
	{"GET", "agree:counter"}, {"EXISTS", "agree:counter", "agree:replicated"}, {"MGET", "agree:counter", "agree:replicated"},
	{"SET", "agree:counter"}, {"INCR", "agree:counter", "extra"},
}

func playAgree(t *testing.T, c redis.UniversalClient) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, step := range agreeScript {
		v, err := c.Do(ctx, step...).Result()
		out = append(out, fmt.Sprintf("%v -> %#v err=%v", step, v, err))
	}
	return out
}

// TestHookAndProxyAgree plays the same commands through the go-redis hook
// and through the sidecar proxy, each with an engine of its own on the
// same table, against the same fresh Redis: every reply must be the same,
// multi-key commands on mitigated keys included (engine.Serve is the one
// implementation both use).
func TestHookAndProxyAgree(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			flush := func() {
				for _, n := range tg.nodes {
					if err := n.FlushAll(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			flush()
			e := engine.New(tg.app, engine.Options{})
			defer e.Close()
			e.SetTable(agreeTable())
			tg.app.AddHook(redishook.New(e))
			viaHook := playAgree(t, tg.app)

			flush()
			pe := engine.New(tg.direct, engine.Options{})
			defer pe.Close()
			pe.SetTable(agreeTable())
			addrs := make([]string, len(tg.nodes))
			for i, n := range tg.nodes {
				addrs[i] = n.Options().Addr
			}
			paddr, _ := proxytest.Start(t, proxy.Config{Upstreams: addrs[:1], Cluster: len(addrs) > 1, Engine: pe})
			pc := redis.NewClient(&redis.Options{Addr: paddr})
			defer pc.Close()
			viaProxy := playAgree(t, pc)

			if diff := cmp.Diff(viaHook, viaProxy); diff != "" {
				t.Errorf("the hook and the proxy answer differently (-hook +proxy):\n%s", diff)
			}
		})
	}
}
