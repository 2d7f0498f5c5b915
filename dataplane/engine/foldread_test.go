package engine_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/controllers/fold"
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestReadsExactDuringFolds: every read of a split counter, a hash split
// by field, a sorted set and a set split by member is exact while folds move the
// retired generation's values into the base key, on real Redis
// (standalone and a 3-master cluster) with go-redis' defaults. Late
// writers (an engine still on the table of the retired generation) keep
// that generation's shards filled, a folder folds it in a loop, current
// writers write the new generation, and readers read continuously: each
// read's value of each field must lie between the increments acknowledged
// before it was sent and those sent before its reply came back (a set:
// every member acknowledged before the read is in it, and no more members
// than were sent). Readers
// that summed one snapshot per place counted a moving value twice (credit
// seen, debit not) or not at all (debit seen, credit not).
func TestReadsExactDuringFolds(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			for _, kind := range []string{"counter", "hash", "zset"} {
				t.Run(kind, func(t *testing.T) { readsDuringFolds(t, tg, kind) })
			}
			t.Run("set", func(t *testing.T) { setReadsDuringFolds(t, tg) })
		})
	}
}

// foldRace is one run of TestReadsExactDuringFolds: fields and the
// increments sent and acknowledged per field.
type foldRace struct {
	fields      []string
	sent, acked []atomic.Int64
}

func (r *foldRace) index(f string) int {
	for i, x := range r.fields {
		if x == f {
			return i
		}
	}
	return -1
}

func readsDuringFolds(t *testing.T, tg target, kind string) {
	ctx := context.Background()
	k := key(t, fmt.Sprint(time.Now().UnixNano()))
	old := routing.Generation{FromEpoch: 0, Shards: 3}
	cur := routing.Generation{FromEpoch: 1, Shards: 4}
	split := func(gens ...routing.Generation) *routing.Split {
		s := &routing.Split{Generations: gens}
		switch kind {
		case "hash":
			s.Members = true
		case "zset":
			s.Members, s.Kind = true, routing.KindZSet
		}
		return s
	}
	now := split(old, cur)
	eLate := newEngine(t, tg.client, engine.Options{})
	eLate.SetTable(table(routing.Entry{Key: k, Source: routing.SourceDetected, Split: split(old)}))
	// e's HINCRBY and ZINCRBY replies read the field's other places at
	// every write (TotalRefresh), so that they are checked as reads are.
	e := newEngine(t, tg.client, engine.Options{TotalRefresh: time.Nanosecond})
	e.SetTable(table(routing.Entry{Key: k, Source: routing.SourceDetected, Split: now}))

	r := &foldRace{fields: []string{""}}
	if kind != "counter" {
		r.fields = []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	}
	r.sent = make([]atomic.Int64, len(r.fields))
	r.acked = make([]atomic.Int64, len(r.fields))
	write := func(w *engine.Engine, f string) (int64, error) {
		switch kind {
		case "counter":
			return w.IncrBy(ctx, k, 1)
		case "hash":
			return w.HIncrBy(ctx, k, f, 1)
		}
		v, err := w.ZIncrBy(ctx, k, f, 1)
		return int64(v), err
	}
	// read returns each field's value as one read gives it (absent: 0);
	// n rotates over the kind's reads.
	read := func(n int) (map[string]int64, error) {
		out := map[string]int64{}
		switch kind {
		case "counter":
			v, _, err := e.Get(ctx, k)
			if err != nil {
				return nil, err
			}
			var x int64
			if v != nil {
				if _, err := fmt.Sscan(string(v), &x); err != nil {
					return nil, err
				}
			}
			out[""] = x
		case "hash":
			if n%2 == 0 {
				vals, present, err := e.HMGet(ctx, k, r.fields)
				if err != nil {
					return nil, err
				}
				for i, f := range r.fields {
					if present[i] {
						var x int64
						fmt.Sscan(vals[i], &x)
						out[f] = x
					}
				}
				return out, nil
			}
			fs, vals, err := e.HGetAll(ctx, k)
			if err != nil {
				return nil, err
			}
			for i, f := range fs {
				var x int64
				fmt.Sscan(vals[i], &x)
				out[f] = x
			}
		default:
			switch n % 3 {
			case 0:
				vals, present, err := e.ZScores(ctx, k, r.fields)
				if err != nil {
					return nil, err
				}
				for i, f := range r.fields {
					if present[i] {
						out[f] = int64(vals[i])
					}
				}
			default:
				// ZREVRANGE 0 2 WITHSCORES (the top 3) and ZRANGE 0 -1
				// WITHSCORES (every place read whole).
				args := []string{"ZREVRANGE", k, "0", "2", "WITHSCORES"}
				if n%3 == 2 {
					args = []string{"ZRANGE", k, "0", "-1", "WITHSCORES"}
				}
				b := make([][]byte, len(args))
				for i, a := range args {
					b[i] = []byte(a)
				}
				rep := e.ServeZSet(ctx, b, func(string, uint32, uint32, int) {})
				if rep.Kind == engine.ReplyError {
					return nil, rep.Err
				}
				for i := 0; i+1 < len(rep.Elems); i += 2 {
					var x float64
					fmt.Sscan(string(rep.Elems[i+1].Bulk), &x)
					out[string(rep.Elems[i].Bulk)] = int64(x)
				}
				if n%3 == 1 {
					out["#top"] = int64(len(rep.Elems) / 2)
				}
			}
		}
		return out, nil
	}

	const runFor = 2 * time.Second
	end := time.Now().Add(runFor)
	var wg sync.WaitGroup
	var writeErrs, readErrs, replies, wrongReplies atomic.Int64
	var exampleMu sync.Mutex
	var example string
	// Late writers fill the retired generation, a current one the new.
	for i, w := range []*engine.Engine{eLate, eLate, e} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < maxOps && time.Now().Before(end); n++ {
				f := (n + i) % len(r.fields)
				lo := r.acked[f].Load() + 1
				r.sent[f].Add(1)
				v, err := write(w, r.fields[f])
				if err != nil {
					writeErrs.Add(1)
					continue
				}
				r.acked[f].Add(1)
				if w != e || kind == "counter" {
					continue // a counter's INCR reply is an estimate (docs/engine.md)
				}
				replies.Add(1)
				if hi := r.sent[f].Load(); v < lo || v > hi {
					wrongReplies.Add(1)
					exampleMu.Lock()
					example = fmt.Sprintf("an increment of field %q replied %d, want within [%d, %d]", r.fields[f], v, lo, hi)
					exampleMu.Unlock()
				}
			}
		}()
	}
	folder := fold.New(tg.client, fold.Options{})
	moves := foldInLoop(t, &wg, folder, k, now, old, end)
	var reads, wrong atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < maxOps && time.Now().Before(end); n++ {
				lo := make([]int64, len(r.fields))
				for i := range lo {
					lo[i] = r.acked[i].Load()
				}
				got, err := read(n)
				if err != nil {
					readErrs.Add(1)
					continue
				}
				reads.Add(1)
				for f, v := range got {
					i := r.index(f)
					if i < 0 {
						continue // "#top"
					}
					if hi := r.sent[i].Load(); v < lo[i] || v > hi {
						wrong.Add(1)
						exampleMu.Lock()
						example = fmt.Sprintf("read %d of field %q, want within [%d, %d] (acknowledged before the read, sent before its reply)", v, f, lo[i], hi)
						exampleMu.Unlock()
						break
					}
				}
				// A top-3 lists 3 once every field was written (the
				// writers cover them all in their first rounds).
				if top, ok := got["#top"]; ok && lo[len(lo)-1] > 0 && top != 3 {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d reads, %d wrong; %d increment replies checked, %d wrong; %d fold moves, %d write errors, %d read errors",
		reads.Load(), wrong.Load(), replies.Load(), wrongReplies.Load(), moves.Load(), writeErrs.Load(), readErrs.Load())
	if w, wr := wrong.Load(), wrongReplies.Load(); w > 0 || wr > 0 {
		t.Errorf("%d of %d reads and %d of %d increment replies wrong during folds (%d moves), e.g. %s", w, reads.Load(), wr, replies.Load(), moves.Load(), example)
	}
	if writeErrs.Load() > 0 || readErrs.Load() > 0 {
		t.Errorf("%d write errors, %d read errors", writeErrs.Load(), readErrs.Load())
	}
	if moves.Load() < 100 || reads.Load() < 100 {
		t.Fatalf("%d fold moves and %d reads: too few for the test to mean anything", moves.Load(), reads.Load())
	}
	// Writers stopped: the fold completes and every read is exact.
	for range 20 {
		res, err := folder.Split(ctx, k, now, old)
		if err != nil {
			t.Fatal(err)
		}
		if res.Done {
			break
		}
	}
	got, err := read(0)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range r.fields {
		if want := r.acked[i].Load(); got[f] != want {
			t.Errorf("after the fold, field %q = %d, want %d", f, got[f], want)
		}
	}
}

// TestFoldReadCost: the commands a read of a split key sends. With no
// generation retiring (no fold can be in flight) a counter's GET is one
// GET per place and a hash's HGETALL one HGETALL per place, as before
// reads were made exact under folds; while a generation retires, each
// place is one EVAL (the read and its fold records, read by the script),
// in the same one pipeline. The numbers are docs/engine.md's.
func TestFoldReadCost(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			for _, c := range []struct {
				name   string
				gens   []routing.Generation
				places int64
				fold   bool
			}{
				{"settled", []routing.Generation{{FromEpoch: 0, Shards: 4}}, 1 + 4, false},
				{"next announced", []routing.Generation{{FromEpoch: 0, Shards: 4}, {FromEpoch: 1 << 40, Shards: 3}}, 1 + 4 + 3, false},
				{"retiring", []routing.Generation{{FromEpoch: 0, Shards: 4}, {FromEpoch: 1, Shards: 3}}, 1 + 4 + 3, true},
			} {
				k := key(t, fmt.Sprint(c.name, time.Now().UnixNano()))
				h := k + ":h"
				e := newEngine(t, tg.client, engine.Options{})
				e.SetTable(table(
					routing.Entry{Key: k, Source: routing.SourceDetected, Split: &routing.Split{Generations: c.gens}},
					routing.Entry{Key: h, Source: routing.SourceDetected, Split: &routing.Split{Generations: c.gens, Members: true}}))
				if _, err := e.IncrBy(ctx, k, 5); err != nil {
					t.Fatal(err)
				}
				if _, err := e.HIncrBy(ctx, h, "f", 5); err != nil {
					t.Fatal(err)
				}
				const reads = 20
				tg.resetStats(t)
				for range reads {
					if v, _, err := e.Get(ctx, k); err != nil || string(v) != "5" {
						t.Fatalf("GET = %q, %v; want 5", v, err)
					}
				}
				gets, evals := tg.calls(t, "get"), tg.calls(t, "eval")
				tg.resetStats(t)
				for range reads {
					if fs, vs, err := e.HGetAll(ctx, h); err != nil || len(fs) != 1 || vs[0] != "5" {
						t.Fatalf("HGETALL = %q %q, %v; want f 5", fs, vs, err)
					}
				}
				hgetalls, hevals := tg.calls(t, "hgetall"), tg.calls(t, "eval")
				t.Logf("%s: per read of %d places: counter %d GET %d EVAL, hash %d HGETALL %d EVAL (commands inside scripts included)",
					c.name, c.places, gets/reads, evals/reads, hgetalls/reads, hevals/reads)
				if !c.fold {
					if gets != reads*c.places || evals != 0 || hgetalls != reads*c.places || hevals != 0 {
						t.Errorf("%s: a read sent %d GET and %d EVAL, %d HGETALL and %d EVAL; want one plain command per place (%d) and no EVAL",
							c.name, gets/reads, evals/reads, hgetalls/reads, hevals/reads, c.places)
					}
					continue
				}
				if evals != reads*c.places || hevals != reads*c.places {
					t.Errorf("%s: a read sent %d and %d EVAL; want one per place (%d)", c.name, evals/reads, hevals/reads, c.places)
				}
			}
		})
	}
}

// TestFoldReadWithoutScriptRights: a Redis user without +eval, or
// without the right to run a command the script runs on the fold records
// (here HGETALL), still reads a split key while a generation retires, as
// with no fold in flight (one snapshot per place), rather than failing
// every read; the refusal is counted as an upstream error.
func TestFoldReadWithoutScriptRights(t *testing.T) {
	for _, lacks := range []string{"-eval", "-hgetall"} {
		t.Run(lacks, func(t *testing.T) { foldReadWithout(t, lacks) })
	}
}

func foldReadWithout(t *testing.T, lacks string) {
	tg := targets(t)[0]
	ctx := context.Background()
	user := "foldread-lacks" + lacks
	if err := tg.client.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", lacks).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.client.Do(context.Background(), "ACL", "DELUSER", user) })
	opts := tg.client.(*redis.Client).Options()
	c := redis.NewClient(&redis.Options{Addr: opts.Addr, Username: user, Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	k := key(t, fmt.Sprint(time.Now().UnixNano()))
	gens := []routing.Generation{{FromEpoch: 0, Shards: 4}, {FromEpoch: 1, Shards: 3}}
	e := newEngine(t, c, engine.Options{})
	e.SetTable(table(
		routing.Entry{Key: k, Source: routing.SourceDetected, Split: &routing.Split{Generations: gens}},
		routing.Entry{Key: k + ":h", Source: routing.SourceDetected, Split: &routing.Split{Generations: gens, Members: true}}))
	if _, err := e.IncrBy(ctx, k, 5); err != nil {
		t.Fatal(err)
	}
	if v, _, err := e.Get(ctx, k); err != nil || string(v) != "5" {
		t.Fatalf("GET = %q, %v; want 5", v, err)
	}
	if _, err := e.HIncrBy(ctx, k+":h", "f", 2); err != nil {
		t.Fatal(err)
	}
	if fs, vs, err := e.HMGet(ctx, k+":h", []string{"f"}); err != nil || len(fs) != 1 || fs[0] != "2" || !vs[0] {
		t.Fatalf("HMGET = %q %v, %v; want 2", fs, vs, err)
	}
}

// setReadsDuringFolds is TestReadsExactDuringFolds for a set split by
// member: writers add members of their own, each once, so a member leaves
// a retired shard once, and every read (SMEMBERS, SISMEMBER of the last
// members acknowledged) must hold every member acknowledged before it was
// sent.
func setReadsDuringFolds(t *testing.T, tg target) {
	ctx := context.Background()
	k := key(t, fmt.Sprint(time.Now().UnixNano()))
	old := routing.Generation{FromEpoch: 0, Shards: 3}
	split := func(gens ...routing.Generation) *routing.Split {
		return &routing.Split{Generations: gens, Members: true, Kind: routing.KindSet}
	}
	now := split(old, routing.Generation{FromEpoch: 1, Shards: 4})
	eLate := newEngine(t, tg.client, engine.Options{})
	eLate.SetTable(table(routing.Entry{Key: k, Source: routing.SourceDetected, Split: split(old)}))
	e := newEngine(t, tg.client, engine.Options{})
	e.SetTable(table(routing.Entry{Key: k, Source: routing.SourceDetected, Split: now}))

	var mu sync.Mutex
	var acked []string // in the order acknowledged
	var sent atomic.Int64
	const runFor = 2 * time.Second
	end := time.Now().Add(runFor)
	var wg sync.WaitGroup
	var writeErrs, readErrs atomic.Int64
	for i, w := range []*engine.Engine{eLate, eLate, e} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < maxOps && time.Now().Before(end); n++ {
				m := fmt.Sprintf("w%d:%d", i, n)
				sent.Add(1)
				if _, err := w.SAdd(ctx, k, []string{m}); err != nil {
					writeErrs.Add(1)
					continue
				}
				mu.Lock()
				acked = append(acked, m)
				mu.Unlock()
			}
		}()
	}
	folder := fold.New(tg.client, fold.Options{})
	moves := foldInLoop(t, &wg, folder, k, now, old, end)
	var reads, wrong atomic.Int64
	var exampleMu sync.Mutex
	var example string
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < maxOps && time.Now().Before(end); n++ {
				mu.Lock()
				want := acked[:len(acked):len(acked)]
				mu.Unlock()
				var missing []string
				if n%2 == 0 {
					got, err := e.SMembers(ctx, k)
					if err != nil {
						readErrs.Add(1)
						continue
					}
					in := make(map[string]bool, len(got))
					for _, m := range got {
						in[m] = true
					}
					for _, m := range want {
						if !in[m] {
							missing = append(missing, m)
						}
					}
					if hi := sent.Load(); int64(len(got)) > hi {
						missing = append(missing, fmt.Sprintf("(%d members, %d sent)", len(got), hi))
					}
				} else {
					last := want[max(0, len(want)-32):]
					held, err := e.SIsMembers(ctx, k, last)
					if err != nil {
						readErrs.Add(1)
						continue
					}
					for i, h := range held {
						if !h {
							missing = append(missing, last[i])
						}
					}
				}
				reads.Add(1)
				if len(missing) > 0 {
					wrong.Add(1)
					exampleMu.Lock()
					example = fmt.Sprintf("%d members acknowledged before the read missing from it, e.g. %q", len(missing), missing[0])
					exampleMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d reads, %d wrong, %d fold moves, %d write errors, %d read errors", reads.Load(), wrong.Load(), moves.Load(), writeErrs.Load(), readErrs.Load())
	if w := wrong.Load(); w > 0 {
		t.Errorf("%d of %d reads wrong during folds (%d moves), e.g. %s", w, reads.Load(), moves.Load(), example)
	}
	if writeErrs.Load() > 0 || readErrs.Load() > 0 {
		t.Errorf("%d write errors, %d read errors", writeErrs.Load(), readErrs.Load())
	}
	if moves.Load() < 100 || reads.Load() < 100 {
		t.Fatalf("%d fold moves and %d reads: too few for the test to mean anything", moves.Load(), reads.Load())
	}
	for range 20 {
		if res, err := folder.Split(ctx, k, now, old); err != nil {
			t.Fatal(err)
		} else if res.Done {
			break
		}
	}
	got, err := e.SMembers(ctx, k)
	if err != nil || len(got) != len(acked) {
		t.Errorf("after the fold, %d members, %v; want the %d acknowledged", len(got), err, len(acked))
	}
}

// TestFoldReadAfterRetire: a process whose table still lists a generation
// the manager folded and retired (its shards' sequence numbers left the
// ledger for keys of their own: fold.Retire) reads the key exactly, for a
// counter, a hash and a set.
func TestFoldReadAfterRetire(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			ctx := context.Background()
			k := key(t, fmt.Sprint(time.Now().UnixNano()))
			old := routing.Generation{FromEpoch: 0, Shards: 3}
			gens := []routing.Generation{old, {FromEpoch: 1, Shards: 2}}
			splits := map[string]*routing.Split{
				k + ":c": {Generations: gens},
				k + ":h": {Generations: gens, Members: true},
				k + ":s": {Generations: gens, Members: true, Kind: routing.KindSet},
			}
			late, e := newEngine(t, tg.client, engine.Options{}), newEngine(t, tg.client, engine.Options{})
			var lateEntries, entries []routing.Entry
			for _, key := range slices.Sorted(maps.Keys(splits)) { // a table's entries are sorted
				s := splits[key]
				lateEntries = append(lateEntries, routing.Entry{Key: key, Source: routing.SourceDetected, Split: &routing.Split{Generations: gens[:1], Members: s.Members, Kind: s.Kind}})
				entries = append(entries, routing.Entry{Key: key, Source: routing.SourceDetected, Split: s})
			}
			late.SetTable(table(lateEntries...))
			e.SetTable(table(entries...))
			// Several moves per shard, so that its number is past 1.
			folder := fold.New(tg.client, fold.Options{})
			for round := range 3 {
				for i := range 12 {
					must(t, func() error { _, err := late.IncrBy(ctx, k+":c", 1); return err }())
					must(t, func() error { _, err := late.HIncrBy(ctx, k+":h", fmt.Sprint("f", i%4), 1); return err }())
					must(t, func() error { _, err := late.SAdd(ctx, k+":s", []string{fmt.Sprint("m", round, i)}); return err }())
				}
				for key, s := range splits {
					if _, err := folder.Split(ctx, key, s, old); err != nil {
						t.Fatal(err)
					}
				}
			}
			for key, s := range splits {
				if res, err := folder.Split(ctx, key, s, old); err != nil || !res.Done {
					t.Fatalf("fold %s: %+v, %v", key, res, err)
				}
				if err := folder.Retire(ctx, key, old, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			if v, _, err := e.Get(ctx, k+":c"); err != nil || string(v) != "36" {
				t.Errorf("counter after Retire = %q, %v; want 36", v, err)
			}
			if fs, vs, err := e.HGetAll(ctx, k+":h"); err != nil || fmt.Sprint(fs, vs) != "[f0 f1 f2 f3] [9 9 9 9]" {
				t.Errorf("hash after Retire = %v %v, %v; want f0..f3 9 each", fs, vs, err)
			}
			if ms, err := e.SMembers(ctx, k+":s"); err != nil || len(ms) != 36 {
				t.Errorf("set after Retire: %d members, %v; want 36", len(ms), err)
			}
		})
	}
}

// maxOps bounds each loop of the fold tests' writers, readers and folder,
// beside their run time.
const maxOps = 50_000

// foldInLoop has folder fold key's retired generation old of split sp over and over
// until end (at most maxOps times) on a goroutine counted in wg, as the
// manager would; it returns the moves made so far.
func foldInLoop(t *testing.T, wg *sync.WaitGroup, folder *fold.Folder, key string, sp *routing.Split, old routing.Generation, end time.Time) *atomic.Int64 {
	var moves atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; n < maxOps && time.Now().Before(end); n++ {
			res, err := folder.Split(context.Background(), key, sp, old)
			if err != nil {
				t.Errorf("fold: %v", err)
				return
			}
			moves.Add(int64(res.Moves))
		}
	}()
	return &moves
}
