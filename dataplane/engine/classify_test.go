package engine_test

import (
	"strings"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

func TestClassify(t *testing.T) {
	entries := map[string]*routing.Entry{
		"c": {Key: "c", Split: &routing.Split{Generations: []routing.Generation{{Shards: 4}}}},
		"r": {Key: "r", Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 1000}},
		"l": {Key: "l", LocalCache: &routing.LocalCache{TTLMillis: 1000}},
	}
	lookup := func(k string) (*routing.Entry, bool) { en, ok := entries[k]; return en, ok }
	cases := []struct {
		cmd   string
		inTx  bool
		op    engine.Op
		class engine.Class
		err   string
	}{
		{cmd: "GET plain", class: engine.ClassNone},
		{cmd: "PING", class: engine.ClassNone},
		{cmd: "get c", op: engine.OpGet, class: engine.ClassCounter},
		{cmd: "UNLINK plain c", op: engine.OpDel, class: engine.ClassCounter},
		{cmd: "DEL l", op: engine.OpRaw, class: engine.ClassCache},
		{cmd: "MGET plain c", op: engine.OpMGet, class: engine.ClassCounter},
		{cmd: "EXISTS c", op: engine.OpExists, class: engine.ClassCounter},
		{cmd: "EXISTS r", op: engine.OpRaw, class: engine.ClassReplicated},
		{cmd: "MSET plain 1 r v", op: engine.OpMSet, class: engine.ClassReplicated},
		{cmd: "MSETNX r v", op: engine.OpRefuse, class: engine.ClassReplicated, err: "MSETNX cannot be atomic"},
		{cmd: "APPEND c x", op: engine.OpRefuse, class: engine.ClassCounter, err: "APPEND on a key mitigated by split is not supported"},
		{cmd: "APPEND r x", op: engine.OpRefuse, class: engine.ClassReplicated},
		{cmd: "APPEND l x", op: engine.OpRaw, class: engine.ClassCache},
		{cmd: "GETSET c 1", op: engine.OpRefuse, class: engine.ClassCounter},
		{cmd: "EXPIRE c 10", op: engine.OpExpire, class: engine.ClassCounter},
		{cmd: "pexpireat c 10 gt", op: engine.OpExpire, class: engine.ClassCounter},
		{cmd: "PERSIST c", op: engine.OpExpire, class: engine.ClassCounter},
		{cmd: "PTTL c", op: engine.OpTTL, class: engine.ClassCounter},
		{cmd: "EXPIRETIME c", op: engine.OpTTL, class: engine.ClassCounter},
		{cmd: "EXPIRE r 10", op: engine.OpRefuse, class: engine.ClassReplicated},
		{cmd: "EXPIRE c 10", inTx: true, op: engine.OpRefuse, class: engine.ClassCounter, err: "inside MULTI"},
		{cmd: "HSET r f v", op: engine.OpRaw, class: engine.ClassReplicated},
		{cmd: "TTL r", op: engine.OpRaw, class: engine.ClassReplicated},
		{cmd: "SET r v EX 10", op: engine.OpSet, class: engine.ClassReplicated},
		{cmd: "SET r v GET", op: engine.OpRefuse, class: engine.ClassReplicated, err: "SET with GET"},
		{cmd: "SET l v", op: engine.OpRaw, class: engine.ClassCache},
		{cmd: "setex c 10 5", op: engine.OpSet, class: engine.ClassCounter},
		{cmd: "INCRBY c 2", op: engine.OpIncr, class: engine.ClassCounter},
		{cmd: "RENAME plain c", op: engine.OpRefuse, class: engine.ClassCounter},
		{cmd: "EVAL s 2 plain c", op: engine.OpRefuse, class: engine.ClassCounter},
		{cmd: "EVAL s 1 plain c", class: engine.ClassNone}, // c is an argument, not a key
		{cmd: "INCR c", inTx: true, op: engine.OpRefuse, class: engine.ClassCounter, err: "inside MULTI"},
		{cmd: "GET r", inTx: true, op: engine.OpRaw, class: engine.ClassReplicated},
	}
	for _, tc := range cases {
		var args [][]byte
		for _, f := range strings.Fields(tc.cmd) {
			args = append(args, []byte(f))
		}
		d := engine.Classify(args, lookup, tc.inTx)
		if d.Op != tc.op || d.Class != tc.class || !strings.Contains(d.Err, tc.err) {
			t.Errorf("Classify(%q, inTx=%v) = op %d class %d err %q; want op %d class %d err ~%q",
				tc.cmd, tc.inTx, d.Op, d.Class, d.Err, tc.op, tc.class, tc.err)
		}
		if d.Op == engine.OpRefuse && !strings.HasPrefix(d.Err, "ERR heatsink: ") {
			t.Errorf("Classify(%q): refusal %q lacks the ERR heatsink prefix", tc.cmd, d.Err)
		}
	}
}
