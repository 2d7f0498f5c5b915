package transparency

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// otherDBCommands are commands on the table's keys that the engine serves
// or refuses in the table's database; in any other database Redis must
// answer every one of them, as it does directly.
var otherDBCommands = cmds(
	"SET {t}k v", "GET {t}k", "APPEND {t}k x", "GET {t}k", "STRLEN {t}k", "EXPIRE {t}k 100", "TTL {t}k",
	"INCR {t}likes", "INCRBY {t}likes 5", "GET {t}likes", "INCRBYFLOAT {t}likes 1.5", "APPEND {t}likes 0", "EXPIRE {t}likes 10", "TTL {t}likes", "TYPE {t}likes",
	"SET {t}page html", "GETSET {t}page new", "APPEND {t}page !", "GETDEL {t}page", "EXISTS {t}page {t}k {t}likes",
	"MSET {t}page a {t}k b", "MGET {t}page {t}k {t}likes {t}none", "DEL {t}page {t}likes", "GET {t}k",
)

// TestTransparencyOtherDatabase: with a routing table mitigating keys of
// one database (cached, split, replicated), every command on those keys in
// another database is answered by Redis, byte for byte as directly, with
// the event loop and with sessions, although the table's database holds
// (and the engine has cached) other values of the same keys.
func TestTransparencyOtherDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	s := redistest.Standalone(t)
	nodes := clients(t, s.Addr)
	direct := target{name: "direct", addr: s.Addr, nodes: nodes}
	split := &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}
	for _, tc := range []struct {
		tableDB int32
		// playDB are the databases the scenario runs in ("" for none
		// selected, database 0).
		playDB []string
	}{
		{0, []string{"1", "15"}},
		{2, []string{"", "0", "1"}},
	} {
		ec := redis.NewClient(&redis.Options{Addr: s.Addr})
		t.Cleanup(func() { ec.Close() })
		eng := engine.New(ec, engine.Options{})
		t.Cleanup(func() { eng.Close() })
		eng.SetTable(&routing.Table{SchemaVersion: routing.SchemaVersionFor(tc.tableDB), Version: 1, Database: tc.tableDB, EpochMillis: 60000, Entries: []routing.Entry{
			{Key: "{t}k", Source: routing.SourceDetected, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}},
			{Key: "{t}likes", Source: routing.SourceDetected, Split: &routing.Split{Generations: split.Generations}},
			{Key: "{t}page", Source: routing.SourceDetected, Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 60000}},
		}})
		var proxies []target
		for _, noLoop := range []bool{false, true} {
			name := "proxy-loop"
			if noLoop {
				name = "proxy-sessions"
			}
			addr := startProxy(t, proxy.Config{Upstreams: []string{s.Addr}, Engine: eng, NoEventLoop: noLoop})
			proxies = append(proxies, target{name: name, addr: addr, nodes: nodes})
		}
		for _, db := range tc.playDB {
			// The table's database first holds, and the engine caches,
			// other values of the keys.
			steps := []step{{c: "a", cmds: cmds(fmt.Sprintf("SELECT %d", tc.tableDB), "SET {t}k cached", "GET {t}k", "GET {t}k")}}
			if db == "" {
				// A client that never selects: its own connection.
				steps = append(steps, step{c: "b", cmds: otherDBCommands})
			} else {
				steps = append(steps, step{c: "a", cmds: append(cmds("SELECT "+db), otherDBCommands...)})
			}
			// Back in the table's database, its value is still there.
			steps = append(steps, step{c: "a", cmds: cmds(fmt.Sprintf("SELECT %d", tc.tableDB), "GET {t}k")})
			sc := scenario{name: fmt.Sprintf("table db %d, commands in db %q", tc.tableDB, db), steps: steps}
			for _, proto := range []int{2, 3} {
				t.Run(fmt.Sprintf("%s/RESP%d", sc.name, proto), func(t *testing.T) {
					want := play(t, direct, sc, proto)
					for _, p := range proxies {
						if diff := diffTranscripts(want, play(t, p, sc, proto)); diff != "" {
							t.Errorf("%s differs from direct Redis:\n%s", p.name, diff)
						}
					}
				})
			}
		}
	}
}
