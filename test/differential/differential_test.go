// Package differential holds heatsink's differential harness for
// mitigated keys. Generated sequences of commands are sent by real client
// libraries in their default configuration (go-redis, redis-py, ioredis),
// one by one, pipelined and in transactions, through the heatsink sidecar
// (the shipped binary, started as the injector starts it: credentials from
// files) whose routing table puts every move on one key each (coalesce,
// local cache, replica reads, replicate, split, pre-aggregate, shed) beside an
// unmitigated key, in front of a standalone Redis, a 3-master Redis
// Cluster and a Sentinel-managed master, with passwords on Redis and on
// the Sentinels; and the same sequences are sent by the same library to a
// Redis without heatsink. A run fails on:
//
//   - a reply that differs from Redis's (a lost or doubled write shows in
//     the next read or INCR of the key, and in the final read of every key;
//     a reply from another key or database differs too);
//   - a refusal that is not a documented one (an error naming heatsink,
//     or, for a transaction holding a refused command, EXECABORT with
//     nothing run): a refused command is left out of the reference run;
//   - a batch with no answer within replyWait (a connection left hanging).
//
// `go test` runs one sequence of 24 batches per cell; `make fuzz` runs
// longer ones through HEATSINK_DIFF_SEEDS and HEATSINK_DIFF_BATCHES.
package differential

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// replyWait bounds one batch's answer: a client waiting longer is hung.
const replyWait = 20 * time.Second

var modes = []string{"plain", "pipeline", "tx"}

// move is one mitigation, as the routing table entry of one key.
type move struct {
	name  string
	entry func(key string) routing.Entry
}

var moves = []move{
	{"none", nil},
	{"coalesce", func(k string) routing.Entry { return routing.Entry{Key: k, Coalesce: true} }},
	{"cache", func(k string) routing.Entry {
		return routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}}
	}},
	{"replicate", func(k string) routing.Entry {
		return routing.Entry{Key: k, Replicate: &routing.Replicate{Replicas: 3, TTLMillis: 60000}}
	}},
	{"split", func(k string) routing.Entry {
		return routing.Entry{Key: k, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}}
	}},
	{"preaggregate", func(k string) routing.Entry {
		return routing.Entry{Key: k, Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}},
			PreAggregate: &routing.PreAggregate{FlushMillis: 100}}
	}},
	// Read-hot collections coalesced and cached: their reads are answered
	// by the engine by the whole request (docs/engine.md, reads of every
	// type), in the client's protocol; any write drops them.
	{"coalesce-hash", func(k string) routing.Entry { return routing.Entry{Key: k, Coalesce: true} }},
	{"cache-hash", func(k string) routing.Entry {
		return routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}}
	}},
	{"cache-set", func(k string) routing.Entry {
		return routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}}
	}},
	{"cache-zset", func(k string) routing.Entry {
		return routing.Entry{Key: k, Coalesce: true, LocalCache: &routing.LocalCache{TTLMillis: 60000}}
	}},
	// Reads of a replica within 1 s of the master, and never one older
	// than a write this sidecar made (read your writes, docs/engine.md).
	{"replicareads", func(k string) routing.Entry {
		return routing.Entry{Key: k, ReplicaReads: &routing.ReplicaReads{MaxLagMillis: 1000}}
	}},
	// A budget of one write and one read a second, from a sidecar that
	// starts at the minimum: most of the key's commands are refused.
	{"shed", func(k string) routing.Entry {
		return routing.Entry{Key: k, Shed: &routing.Shed{ReadsPerSecond: 1, WritesPerSecond: 1, DemandReads: 1, DemandWrites: 1, MinPerSecond: 1}}
	}},
}

func moveNamed(name string) move {
	for _, m := range moves {
		if m.name == name {
			return m
		}
	}
	panic("no move " + name)
}

// cell is one run of the matrix: a client library in one mode against one
// topology, on keys of its own (one per move, all in one hash slot so
// that a cluster client may send any of them in one transaction).
type cell struct {
	top  topology
	lib  lib
	mode string
	seed uint64
	tag  string
}

func (c cell) key(m move) string { return "{" + c.tag + "}:" + m.name }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestDifferential runs the matrix: every move × every client library ×
// plain, pipelined and transactional use × standalone, cluster and
// Sentinel.
func TestDifferential(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and the heatsink binary; skipped with -short")
	}
	seeds, batches := envInt("HEATSINK_DIFF_SEEDS", 1), envInt("HEATSINK_DIFF_BATCHES", 24)
	ref := redistest.Standalone(t)
	ls := libs(t)
	for _, top := range topologies(t) {
		t.Run(top.name, func(t *testing.T) {
			var cells []cell
			for _, l := range ls {
				for _, mode := range modes {
					for seed := 1; seed <= seeds; seed++ {
						cells = append(cells, cell{top: top, lib: l, mode: mode, seed: uint64(seed),
							tag: fmt.Sprintf("%s-%s-%s-%d", top.name, l.name, mode, seed)})
					}
				}
			}
			// One sidecar serves every cell: one table with each cell's keys.
			tbl := &routing.Table{SchemaVersion: 1, Policy: "diff", Version: 1, EpochMillis: 60000,
				Replicas: &routing.ReplicaSettings{Addresses: top.replicas, CheckMillis: 100}}
			for _, c := range cells {
				for _, m := range moves {
					if m.entry != nil {
						e := m.entry(c.key(m))
						e.Source = routing.SourceDetected
						tbl.Entries = append(tbl.Entries, e)
					}
				}
			}
			sort.Slice(tbl.Entries, func(i, j int) bool { return tbl.Entries[i].Key < tbl.Entries[j].Key })
			addr, metrics := startSidecar(t, top, tbl)
			for _, c := range cells {
				t.Run(fmt.Sprintf("%s/%s/seed-%d", c.lib.name, c.mode, c.seed), func(t *testing.T) {
					if why := c.lib.noTx(top.cluster); c.mode == "tx" && why != "" {
						t.Skip(why)
					}
					play(t, c, addr, ref.Addr, batches)
				})
			}
			if top.replicas != nil || top.sentinels != nil {
				checkReplicaReads(t, top, addr, metrics, cells)
			}
		})
	}
}

// checkReplicaReads: in the sequences above a read of the replica-reads
// key mostly follows a write of the sidecar's own, which a replica serves
// only once it is known to hold it (read your writes). Once the writes
// stop, the replicas serve the key's reads, and each must be the master's
// value: the key of every cell is read until replicas have answered.
func checkReplicaReads(t *testing.T, top topology, sidecar, metrics string, cells []cell) {
	t.Helper()
	var keys []string
	for _, c := range cells {
		keys = append(keys, c.key(moveNamed("replicareads")))
	}
	before := counter(t, metrics, "heatsink_engine_replica_reads_total")
	eventually.Succeeds(t, 20*time.Second, func() error {
		for _, k := range keys {
			op := []string{"GET", k}
			if got, want := read(t, sidecar, top.cluster, password, op), read(t, top.addrs[0], top.cluster, password, op); got != want {
				t.Fatalf("%v answered %s through the sidecar, %s from the master", op, got, want)
			}
		}
		if n := counter(t, metrics, "heatsink_engine_replica_reads_total") - before; n < float64(len(keys)) {
			return fmt.Errorf("%v reads answered by a replica so far", n)
		}
		return nil
	})
}

// tally counts, per move, the commands sent and those refused.
type tally map[string]*[2]int

// play sends one generated sequence (the cell's seed's) through the sidecar and to the
// reference Redis and compares them batch by batch, then every key.
func play(t *testing.T, c cell, sidecar, reference string, batches int) {
	t.Helper()
	seed := c.seed
	via := c.lib.start(t, sidecar, c.top.cluster, password)
	direct := c.lib.start(t, reference, false, "")
	g := gen{r: rand.New(rand.NewPCG(seed, 0x5eed)), c: c}
	counts := tally{}
	for i := range batches {
		b := g.batch()
		got := via.do(t, b)
		sent := compare(t, i, b, got, counts)
		if len(sent.Ops) == 0 {
			continue
		}
		want := direct.do(t, sent)
		diff(t, i, sent, keep(b, got), want)
	}
	// Every key as it ends: what a lost or doubled write left behind.
	for _, m := range moves {
		k := c.key(m)
		for _, op := range [][]string{{"TYPE", k}, {"GET", k}} {
			if got, want := c.top.final(t, sidecar, m, op), read(t, reference, false, "", op); got != want {
				t.Errorf("seed %d, at the end: %v reads %s behind the sidecar, %s from Redis alone", seed, op, got, want)
			}
		}
	}
	var parts []string
	for _, m := range moves {
		if n := counts[m.name]; n != nil {
			parts = append(parts, fmt.Sprintf("%s %d/%d refused", m.name, n[1], n[0]))
		}
	}
	t.Logf("seed %d: %d batches; %s", seed, batches, strings.Join(parts, ", "))
}

// final reads a key as it ends behind the sidecar at addr: from Redis
// itself where the key is all there is (a shed key's reads may be refused
// through the sidecar), through the sidecar where the logical value is the
// key and its shards.
func (top topology) final(t *testing.T, sidecar string, m move, op []string) string {
	t.Helper()
	if m.name == "split" || m.name == "preaggregate" {
		return read(t, sidecar, top.cluster, password, op)
	}
	return read(t, top.addrs[0], top.cluster, password, op)
}

// read sends op with a go-redis client of its own: a cluster client when
// cluster.
func read(t *testing.T, addr string, cluster bool, pw string, op []string) string {
	t.Helper()
	var c redis.UniversalClient
	if cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, Password: pw})
	} else {
		c = redis.NewClient(&redis.Options{Addr: addr, Password: pw})
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), replyWait)
	defer cancel()
	args := make([]any, len(op))
	for i, a := range op {
		args[i] = a
	}
	v, err := c.Do(ctx, args...).Result()
	return normGo(v, err)
}

// refusal reports whether a reply is one of heatsink's documented
// refusals (an error naming heatsink: a move that cannot serve the
// command, or the shed limiter).
func refusal(reply string) bool {
	return strings.HasPrefix(reply, "e:") && strings.Contains(reply, "heatsink")
}

// compare checks the sidecar's outcome for documented refusals and returns
// what the reference run must send: the batch without the refused
// commands (without the whole transaction when it was refused).
func compare(t *testing.T, i int, b batch, got outcome, counts tally) batch {
	t.Helper()
	for _, op := range b.Ops {
		m := moveOf(op)
		if counts[m] == nil {
			counts[m] = &[2]int{}
		}
		counts[m][0]++
	}
	if got.Aborted != "" {
		if !strings.Contains(got.Aborted, "EXECABORT") {
			t.Errorf("batch %d (%s %v): the transaction failed with %s, not Redis's EXECABORT", i, b.Mode, b.Ops, got.Aborted)
		}
		for _, op := range b.Ops {
			counts[moveOf(op)][1]++
		}
		return batch{Mode: b.Mode}
	}
	if len(got.Replies) != len(b.Ops) {
		t.Fatalf("batch %d (%s %v): %d replies for %d commands", i, b.Mode, b.Ops, len(got.Replies), len(b.Ops))
	}
	sent := batch{Mode: b.Mode}
	for j, op := range b.Ops {
		if refusal(got.Replies[j]) {
			counts[moveOf(op)][1]++
			if b.Mode == "tx" {
				t.Errorf("batch %d: %v refused inside a transaction that ran (%s): Redis would have aborted it (EXECABORT)", i, op, got.Replies[j])
			}
			continue
		}
		sent.Ops = append(sent.Ops, op)
	}
	return sent
}

// keep is got without the replies of refused commands.
func keep(b batch, got outcome) []string {
	var out []string
	for j := range b.Ops {
		if !refusal(got.Replies[j]) {
			out = append(out, got.Replies[j])
		}
	}
	return out
}

func diff(t *testing.T, i int, sent batch, got []string, want outcome) {
	t.Helper()
	if want.Aborted != "" {
		t.Errorf("batch %d (%s %v): Redis alone aborted the transaction (%s), the sidecar ran it", i, sent.Mode, sent.Ops, want.Aborted)
		return
	}
	for j, op := range sent.Ops {
		if j >= len(got) || j >= len(want.Replies) {
			t.Fatalf("batch %d: %d replies through the sidecar, %d from Redis alone, for %d commands", i, len(got), len(want.Replies), len(sent.Ops))
		}
		g, w := got[j], want.Replies[j]
		switch op[0] {
		case "TTL":
			g, w = ttlClass(g), ttlClass(w)
		case "SMEMBERS":
			g, w = unordered(g), unordered(w)
		}
		if g != w {
			t.Errorf("batch %d (%s, %d commands): %v answered %s through the sidecar, %s from Redis alone", i, sent.Mode, len(sent.Ops), op, got[j], want.Replies[j])
		}
	}
}

// ttlClass reads a TTL reply as what both runs must agree on: no key, no
// expiry, or an expiry (its seconds left depend on when it was read).
func ttlClass(r string) string {
	if n, err := strconv.Atoi(strings.TrimPrefix(r, "i:")); err == nil && n > 0 {
		return "i:>0"
	}
	return r
}

// unordered reads an array reply as the set of its elements: a set's
// members come in the order of its hash table, whose hash seed differs
// from one Redis process to another (the sidecar's Redis and the
// reference), so only the members must agree.
func unordered(r string) string {
	inner, ok := strings.CutPrefix(r, "a:[")
	if !ok || !strings.HasSuffix(inner, "]") {
		return r
	}
	el := strings.Split(strings.TrimSuffix(inner, "]"), ",")
	sort.Strings(el)
	return "a:[" + strings.Join(el, ",") + "]"
}

func moveOf(op []string) string {
	if len(op) < 2 {
		return "?"
	}
	return op[1][strings.LastIndexByte(op[1], ':')+1:]
}

// gen generates a cell's batches.
type gen struct {
	r *rand.Rand
	c cell
}

// batch is one to eight commands; half of them start with the shed key's
// write, the case where a client that retries a pipeline by its first
// reply would send every other command again.
func (g *gen) batch() batch {
	n := 1 + g.r.IntN(8)
	b := batch{Mode: g.c.mode}
	for j := range n {
		m := moves[g.r.IntN(len(moves))]
		if j == 0 && g.r.IntN(2) == 0 {
			m = moveNamed("shed")
			b.Ops = append(b.Ops, []string{"INCR", g.c.key(m)})
			continue
		}
		b.Ops = append(b.Ops, g.op(g.c.key(m)))
	}
	return b
}

// op is one command on key: mostly what a counter, a cached value or a
// rate limiter sends, now and then a command of another type; on the
// collections' keys, mostly their reads.
func (g *gen) op(key string) []string {
	v := strconv.Itoa(g.r.IntN(100))
	switch {
	case strings.HasSuffix(key, "-hash"):
		return g.pick(key, [][]string{{"HGETALL"}, {"HGETALL"}, {"HGET", "f" + v[:1]}, {"HMGET", "f1", "f2"}, {"HEXISTS", "f1"},
			{"HLEN"}, {"TYPE"}, {"HSET", "f" + v[:1], v}, {"HINCRBY", "f2", "1"}, {"HDEL", "f1"}})
	case strings.HasSuffix(key, "-set"):
		return g.pick(key, [][]string{{"SISMEMBER", "m" + v[:1]}, {"SISMEMBER", "m1"}, {"SMEMBERS"}, {"SMISMEMBER", "m1", "m2"},
			{"SCARD"}, {"SADD", "m" + v[:1]}, {"SREM", "m" + v[:1]}})
	case strings.HasSuffix(key, "-zset"):
		return g.pick(key, [][]string{{"ZREVRANGE", "0", "9", "WITHSCORES"}, {"ZREVRANGE", "0", "9", "WITHSCORES"}, {"ZSCORE", "p" + v[:1]},
			{"ZRANGE", "0", "-1"}, {"ZRANK", "p1"}, {"ZCARD"}, {"ZINCRBY", "1.5", "p" + v[:1]}, {"ZADD", v, "p" + v[:1]}, {"ZREM", "p1"}})
	}
	switch g.r.IntN(16) {
	case 0, 1:
		return []string{"SET", key, v}
	case 2, 3, 4:
		return []string{"GET", key}
	case 5, 6, 7:
		return []string{"INCR", key}
	case 8:
		return []string{"INCRBY", key, strconv.Itoa(1 + g.r.IntN(5))}
	case 9:
		if strings.HasSuffix(key, ":split") || strings.HasSuffix(key, ":preaggregate") {
			// DEL of a split counter adds −total to its base key, so the
			// manager's fold never loses a late increment, and the key then
			// reads "0", not nil (docs/engine.md, Split): a documented
			// difference, so it is not sent. SET 0 is the same write.
			return []string{"SET", key, "0"}
		}
		return []string{"DEL", key}
	case 10:
		return []string{"EXISTS", key}
	case 11:
		return []string{"EXPIRE", key, "1000"}
	case 12:
		return []string{"TTL", key}
	case 13:
		return []string{"STRLEN", key}
	case 14:
		return []string{"APPEND", key, "7"}
	}
	return []string{"LPUSH", key, v}
}

// pick is one of forms, each a command's name and the arguments after its
// key.
func (g *gen) pick(key string, forms [][]string) []string {
	f := forms[g.r.IntN(len(forms))]
	return append([]string{f[0], key}, f[1:]...)
}
