package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// Reads exact under a fold (docs/engine.md, Reads during a fold). A split
// key's value is the sum of its places, and the fold moves v from a
// retired shard S to the base key K as +v on K (the credit) then −v on S
// (the debit), two steps on two nodes. A reader that sums one snapshot per
// place may take K's after the credit and S's before the debit (v counted
// twice), or K's before the credit and S's after the debit (v not
// counted): places on different masters are read in parallel, in any
// order. Each step of a move records it in its own place's slot, in the
// same script as the change (controllers/fold; routing.ReconcileFold says
// what the records hold). While a generation of the key with shards has a
// successor in effect (only then may it be folded: folding), every place
// is read together with its records by one read-only script, still one
// command per place in the same one pipeline, and the snapshots are
// reconciled: a move seen on one side only is counted once. Otherwise the
// reads are the plain commands they were, and cost nothing more.

// folding reports whether a fold may be in flight on p: some generation
// with shards has a successor in effect (decide folds a generation only
// once its successor is in effect and a margin, which covers clock skew,
// has passed). Before, the table may list the next generation already, but
// nothing moves.
func (e *Engine) folding(p *plan) bool {
	if p == nil || p.entry.Split == nil {
		return false
	}
	gens := p.entry.Split.Generations
	epoch := routing.EpochAt(e.clock.Now(), e.table.Load().table.EpochMillis)
	for i := 0; i+1 < len(gens); i++ {
		if gens[i].Shards > 0 && gens[i+1].FromEpoch <= epoch {
			return true
		}
	}
	return false
}

// readBase runs one read command on the base key KEYS[1] (ARGV: the
// command and its arguments after the key) and returns its reply with its
// fold ledger (HGETALL KEYS[2]) and the retired sequence numbers of the
// shards read (KEYS[3...], routing.FoldSeqKey; "" when missing), read in
// the same atomic step. readShard returns one read of a shard with its ack
// and debit record (KEYS[2], KEYS[3]). Replies are RESP2's (a script's
// default): HGETALL and WITHSCORES as flat arrays, scores as strings.
var (
	readBase = redis.NewScript(`
local out = {redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2)), redis.call('HGETALL', KEYS[2])}
for i = 3, #KEYS do out[i] = redis.call('GET', KEYS[i]) or '' end
return out
`)
	readShard = redis.NewScript(`
return {redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2)), redis.call('GET', KEYS[2]) or '', redis.call('GET', KEYS[3]) or ''}
`)
)

// placeRead is one place's read in a fold-exact read.
type placeRead struct {
	place string
	// args are the command and its arguments after the key.
	args []any
	// fields are the fields or members the read asks for; nil: all (a
	// whole read, or a counter's GET).
	fields []string
}

// covers reports whether the read asks for field f.
func (r placeRead) covers(f string) bool { return r.fields == nil || slices.Contains(r.fields, f) }

// foldReadAttempts bounds how many times a read whose snapshots are more
// than one move of a shard apart is made again. Such snapshots need a
// folder to complete two moves of one shard (four round trips) between
// two commands of one pipeline.
const foldReadAttempts = 8

// errFoldRights is foldRead's error when the Redis user may not run the
// script (+eval) or the commands it runs on the records (+get, +hgetall
// on ~{*}hs:*): the caller then reads as with no fold in flight, one
// snapshot per place, rather than fail every read of the key
// (docs/proxy.md, ACL rules of the sidecar's user).
var errFoldRights = errors.New("heatsink: the Redis user may not read fold records")

// aclRefused reports whether err is Redis' refusal of a command by the
// user's ACL: NOPERM for EVAL itself, and for a command the script runs
// Redis 7's "The user executing the script can't run this command ..."
// (or "... can't access ..." a key).
func aclRefused(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "The user executing the script can't")
}

// errFoldRead is returned when every attempt met snapshots too far apart.
var errFoldRead = errors.New("ERR heatsink: a fold kept moving the key's values during the read; try again")

// foldRead reads every place of reads with its records, in one pipeline,
// and returns each place's values (field or member → value as Redis
// printed it; a counter's under "") as parse gives them, reconciled: a
// move whose credit the base key's snapshot includes and whose debit the
// shard's does not is taken out of the shard's value (where both hold the
// field: a value expired or removed on one side is not counted twice); a
// move whose debit the shard's snapshot includes and whose credit the
// base key's does not is added to the base key's. reads must include the
// base key p.key when it includes a shard.
//
// extra, when set, queues more commands in the same pipeline (each
// attempt's); their errors are the caller's to judge.
func (e *Engine) foldRead(ctx context.Context, p *plan, reads []placeRead, parse func(i int, reply any) (map[string]string, error), extra func(redis.Pipeliner)) ([]map[string]string, error) {
	if len(reads) == 0 {
		return nil, nil
	}
	for range foldReadAttempts {
		e.m.upstreamReads.Inc()
		e.m.fanout.Add(float64(len(reads) - 1))
		cmds, shards := e.sendFoldReads(ctx, p, reads, extra)
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				refused := aclRefused(err)
				if !isRedisError(err) || refused {
					e.m.upstreamErrors.Inc()
				}
				if refused {
					return nil, errFoldRights
				}
				return nil, err
			}
		}
		vals, settled, err := reconcileFoldReads(p, reads, shards, cmds, parse)
		if err != nil || settled {
			return vals, err
		}
		e.m.foldReadRetries.Inc()
	}
	return nil, errFoldRead
}

// sendFoldReads sends foldRead's scripts in one pipeline: each shard's
// read with its records, then the base key's with the ledger and the
// shards' retired sequence numbers (shards, in the order of its
// KEYS[3...]), then extra.
func (e *Engine) sendFoldReads(ctx context.Context, p *plan, reads []placeRead, extra func(redis.Pipeliner)) (cmds []*redis.Cmd, shards []string) {
	cmds = make([]*redis.Cmd, len(reads))
	_, _ = e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, r := range reads {
			if r.place == p.key {
				continue
			}
			shards = append(shards, r.place)
			keys := []string{r.place, routing.FoldAckKey(r.place), routing.FoldDebitKey(r.place)}
			cmds[i] = readShard.Eval(ctx, pipe, keys, r.args...)
		}
		for i, r := range reads {
			if r.place != p.key {
				continue
			}
			keys := []string{r.place, routing.FoldLedgerKey(p.key)}
			for _, s := range shards {
				keys = append(keys, routing.FoldSeqKey(p.key, s))
			}
			cmds[i] = readBase.Eval(ctx, pipe, keys, r.args...)
		}
		if extra != nil {
			extra(pipe)
		}
		return nil
	})
	return cmds, shards
}

// reconcileFoldReads takes foldRead's replies apart (parse) and counts
// each move seen on one side only once (routing.ReconcileFold, applyGap);
// settled is false when a shard and the base key were read more than one
// move apart (read again).
func reconcileFoldReads(p *plan, reads []placeRead, shards []string, cmds []*redis.Cmd, parse func(i int, reply any) (map[string]string, error)) (vals []map[string]string, settled bool, err error) {
	vals = make([]map[string]string, len(reads))
	recs := make([][]any, len(reads))
	base := -1
	for i, c := range cmds {
		out, _ := c.Val().([]any)
		if len(out) < 2 {
			return nil, false, fmt.Errorf("ERR heatsink: unexpected reply of %d elements to a fold-exact read", len(out))
		}
		if vals[i], err = parse(i, out[0]); err != nil {
			return nil, false, err
		}
		recs[i] = out[1:]
		if reads[i].place == p.key {
			base = i
		}
	}
	led, retired := map[string]string{}, map[string]string{}
	if base >= 0 {
		led = flatMap(recs[base][0])
		for j, s := range shards {
			if j+1 < len(recs[base]) {
				retired[s], _ = recs[base][j+1].(string)
			}
		}
	}
	for i, r := range reads {
		if i == base || len(recs[i]) != 2 {
			continue
		}
		ack, _ := recs[i][0].(string)
		debit, _ := recs[i][1].(string)
		gap, ok := routing.ReconcileFold(led, retired[r.place], r.place, ack, debit)
		if !ok {
			return nil, false, nil
		}
		if gap == nil || base < 0 {
			continue
		}
		if err := applyGap(gap, reads[base], r, vals[base], vals[i]); err != nil {
			return nil, false, err
		}
	}
	return vals, true, nil
}

// applyGap counts a move seen on one side only once (foldRead): out of
// the shard's value when both snapshots hold its field and include it,
// into the base key's when neither includes it. Reads that did not ask
// for the move's field are left as they are.
func applyGap(gap *routing.FoldGap, baseRead, shardRead placeRead, base, shard map[string]string) error {
	f := gap.Move.Field
	if !baseRead.covers(f) || !shardRead.covers(f) {
		return nil
	}
	if gap.Move.Kind == 's' {
		// A set's member is in the set when some place holds it: one
		// in both places is counted once by the union already.
		if !gap.Credited {
			base[f] = "1"
		}
		return nil
	}
	if gap.Credited {
		_, inBase := base[f]
		cur, inShard := shard[f]
		if !inBase || !inShard {
			return nil
		}
		v, err := addValue(cur, gap.Move.V, true, gap.Move.Kind == 'z')
		shard[f] = v
		return err
	}
	cur, ok := base[f]
	if !ok {
		cur = "0"
	}
	v, err := addValue(cur, gap.Move.V, false, gap.Move.Kind == 'z')
	base[f] = v
	return err
}

// addValue is cur plus (minus, when neg) v: integers, or doubles when
// score, printed as Redis prints them.
func addValue(cur, v string, neg, score bool) (string, error) {
	if score {
		a, err1 := strconv.ParseFloat(cur, 64)
		b, err2 := strconv.ParseFloat(v, 64)
		if err1 != nil || err2 != nil {
			return "", errors.New("ERR heatsink: a sorted set's place holds a score that does not parse")
		}
		if neg {
			b = -b
		}
		return formatScore(a + b), nil
	}
	a, err1 := strconv.ParseInt(cur, 10, 64)
	b, err2 := strconv.ParseInt(v, 10, 64)
	if err1 != nil || err2 != nil {
		return "", errNotInteger
	}
	if neg {
		if b == math.MinInt64 {
			return "", errHashOverflow
		}
		b = -b
	}
	s, overflow := addInt64(a, b)
	if overflow {
		return "", errHashOverflow
	}
	return strconv.FormatInt(s, 10), nil
}

// flatMap is a RESP2 flat array of pairs (HGETALL, WITHSCORES) as a map.
func flatMap(reply any) map[string]string {
	flat, _ := reply.([]any)
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		m[k] = v
	}
	return m
}

// pickFields maps a RESP2 array of values (HMGET, ZMSCORE), one per field,
// to the fields present.
func pickFields(reply any, fields []string) map[string]string {
	vals, _ := reply.([]any)
	m := make(map[string]string, len(fields))
	for i, v := range vals {
		if s, ok := v.(string); ok && i < len(fields) {
			m[fields[i]] = s
		}
	}
	return m
}

// byPlace groups members by the places that hold them, base key first,
// so that one read per place asks for all of its members: the reads of
// a point read (HMGET, ZMSCORE) under a fold.
func byPlace(p *plan, cmd string, members []string) []placeRead {
	var reads []placeRead
	at := map[string]int{}
	for _, m := range members {
		for _, k := range memberPlaces(p, m) {
			i, ok := at[k]
			if !ok {
				i = len(reads)
				at[k] = i
				reads = append(reads, placeRead{place: k, args: []any{cmd}, fields: []string{}})
			}
			if !slices.Contains(reads[i].fields, m) {
				reads[i].fields = append(reads[i].fields, m)
				reads[i].args = append(reads[i].args, m)
			}
		}
	}
	return reads
}

// wholeReads is one read of every place of p with args.
func wholeReads(p *plan, args ...any) []placeRead {
	reads := make([]placeRead, len(p.readKeys))
	for i, k := range p.readKeys {
		reads[i] = placeRead{place: k, args: args}
	}
	return reads
}
