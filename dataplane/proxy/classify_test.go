package proxy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// discardObserver is an Observer that drops what it is told: classify
// only checks whether one is set.
type discardObserver struct{}

func (discardObserver) Observe(string, string, uint32, uint32, uint32) {}

// classifiedView is what a test compares of a classification (command.Info
// has unexported fields, and the engine's decision is summed up by its Op).
type classifiedView struct {
	Known        bool
	Route        string
	Key          string // "<none>" for a keyless command
	Node         int
	Mitigated    bool
	EngineOp     engine.Op
	ReadKey      string
	ObserveWrite bool
	Blocking     bool
	Sticky       bool
	Tracking     bool
	TrackingOn   bool
	Frames       int32
}

func viewOf(c classified) classifiedView {
	v := classifiedView{
		Known: c.known, Route: routeName(c.route), Key: "<none>", Node: c.node,
		Mitigated: c.mitigated, EngineOp: c.decision.Op, ReadKey: c.readKey,
		ObserveWrite: c.observeWrite, Blocking: c.blocking, Sticky: c.sticky,
		Tracking: c.tracking, TrackingOn: c.trackingOn, Frames: c.frames,
	}
	if c.key != nil {
		v.Key = string(c.key)
	}
	return v
}

func routeName(r route) string {
	name := [...]string{"forward", "ownConn", "exclusive", "replyMode", "hello", "refuse", "quit", "pipe", "state", "fanout"}[r.op]
	if r.op == opRefuse {
		name += ": " + r.err
	}
	return name
}

// classifyTable mitigates a cached key and a split counter.
var classifyTable = &routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000, Entries: []routing.Entry{
	{Key: "hot", Source: routing.SourceDetected, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}},
	{Key: "likes", Source: routing.SourceDetected, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}},
}}

// newClassifyProxy returns a proxy that is never served: classify reads
// only its configuration, the engine's table and the slot map. In cluster
// mode slots 8192 and up are node 1's ("foo" is slot 12182, "bar" 5061).
func newClassifyProxy(t *testing.T, cluster, withEngine, withObserver bool) *Proxy {
	t.Helper()
	cfg := Config{Upstreams: []string{"127.0.0.1:1"}, Cluster: cluster}
	if withEngine {
		rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		t.Cleanup(func() { rc.Close() })
		eng := engine.New(rc, engine.Options{})
		t.Cleanup(func() { eng.Close() })
		eng.SetTable(classifyTable)
		cfg.Engine = eng
	}
	if withObserver {
		cfg.Observer = discardObserver{}
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cluster {
		var m [16384]uint16
		for s := 8192; s < len(m); s++ {
			m[s] = 1
		}
		p.topo.SetMap(&m)
	}
	return p
}

func TestClassify(t *testing.T) {
	none := "<none>"
	loop := mode{shared: true, proto: 2}
	own := mode{proto: 2}
	ownCluster := mode{cluster: true, proto: 2}
	inTx := mode{proto: 2, inTx: true}
	for name, tc := range map[string]struct {
		cmd     string
		mode    mode
		cluster bool
		// plain: no engine and no Observer.
		plain bool
		want  classifiedView
	}{
		"read, observed with its reply": {
			cmd: "GET k", mode: loop,
			want: classifiedView{Known: true, Route: "forward", Key: "k", ReadKey: "k"},
		},
		"read without an Observer": {
			cmd: "GET k", mode: loop, plain: true,
			want: classifiedView{Known: true, Route: "forward", Key: "k"},
		},
		"write, observed as sent": {
			cmd: "SET k v", mode: own,
			want: classifiedView{Known: true, Route: "forward", Key: "k", ObserveWrite: true},
		},
		"keyless": {
			cmd: "PING", mode: loop,
			want: classifiedView{Known: true, Route: "forward", Key: none},
		},
		"unknown command": {
			cmd: "NOSUCH x", mode: loop,
			want: classifiedView{Route: "ownConn", Key: none},
		},
		"cluster: the first key's node": {
			cmd: "GET foo", mode: ownCluster, cluster: true,
			want: classifiedView{Known: true, Route: "forward", Key: "foo", Node: 1, ReadKey: "foo"},
		},
		"cluster: the other node": {
			cmd: "SET bar v", mode: ownCluster, cluster: true,
			want: classifiedView{Known: true, Route: "forward", Key: "bar", ObserveWrite: true},
		},
		"standalone: node 0 whatever the slot": {
			cmd: "GET foo", mode: own,
			want: classifiedView{Known: true, Route: "forward", Key: "foo", ReadKey: "foo"},
		},
		"cached key: the engine reads it": {
			cmd: "GET hot", mode: loop,
			want: classifiedView{Known: true, Route: "forward", Key: "hot", Mitigated: true, EngineOp: engine.OpGet, ReadKey: "hot"},
		},
		"cached key without an engine": {
			cmd: "GET hot", mode: loop, plain: true,
			want: classifiedView{Known: true, Route: "forward", Key: "hot"},
		},
		"cached key: a raw write": {
			cmd: "APPEND hot x", mode: loop,
			want: classifiedView{Known: true, Route: "forward", Key: "hot", Mitigated: true, EngineOp: engine.OpRaw, ObserveWrite: true},
		},
		"split counter: the engine increments it": {
			cmd: "INCR likes", mode: loop,
			want: classifiedView{Known: true, Route: "forward", Key: "likes", Mitigated: true, EngineOp: engine.OpIncr, ObserveWrite: true},
		},
		"split counter inside MULTI: refused": {
			cmd: "INCR likes", mode: inTx,
			want: classifiedView{Known: true, Route: "forward", Key: "likes", Mitigated: true, EngineOp: engine.OpRefuse, ObserveWrite: true},
		},
		"mitigated key after the first": {
			cmd: "MGET a hot", mode: loop,
			want: classifiedView{Known: true, Route: "forward", Key: "a", Mitigated: true, EngineOp: engine.OpMGet, ReadKey: "a"},
		},
		"blocking, shared: a connection of its own": {
			cmd: "BLPOP q 0", mode: loop,
			want: classifiedView{Known: true, Route: "exclusive", Key: "q", ObserveWrite: true, Blocking: true},
		},
		"XREAD BLOCK blocks": {
			cmd: "XREAD BLOCK 0 STREAMS s 0", mode: own,
			want: classifiedView{Known: true, Route: "forward", Key: "s", ReadKey: "s", Blocking: true},
		},
		// CLIENT is not in the proxy's command table (known): Redis checks
		// its subcommands.
		"CLIENT SETNAME leaves state": {
			cmd: "CLIENT SETNAME x", mode: own,
			want: classifiedView{Route: "forward", Key: none, Sticky: true},
		},
		"CLIENT TRACKING on": {
			cmd: "client tracking on", mode: own,
			want: classifiedView{Route: "forward", Key: none, Sticky: true, Tracking: true, TrackingOn: true},
		},
		"CLIENT TRACKING off": {
			cmd: "CLIENT TRACKING OFF", mode: own,
			want: classifiedView{Route: "forward", Key: none, Sticky: true, Tracking: true},
		},
		"UNSUBSCRIBE: one frame per channel": {
			cmd: "UNSUBSCRIBE a b c", mode: own,
			want: classifiedView{Known: true, Route: "forward", Key: none, Frames: 3},
		},
		"UNSUBSCRIBE of every channel: one frame": {
			cmd: "UNSUBSCRIBE", mode: own,
			want: classifiedView{Known: true, Route: "forward", Key: none, Frames: 1},
		},
		"SSUBSCRIBE: its channel's node": {
			cmd: "SSUBSCRIBE foo", mode: ownCluster, cluster: true,
			want: classifiedView{Known: true, Route: "pipe", Key: "foo", Node: 1, ReadKey: "foo"},
		},
		"refused": {
			cmd: "PSYNC ? -1", mode: own,
			want: classifiedView{Known: true, Route: "refuse: " + refuseReplication([]byte("PSYNC")), Key: none},
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := newClassifyProxy(t, tc.cluster, !tc.plain, !tc.plain)
			var args [][]byte
			for _, f := range strings.Fields(tc.cmd) {
				args = append(args, []byte(f))
			}
			got := viewOf(p.classify(args, tc.mode))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("classify(%q) (-want +got):\n%s", tc.cmd, diff)
			}
		})
	}
}
