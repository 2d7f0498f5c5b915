package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// ReplyKind is the type of a Reply, in Redis' terms.
type ReplyKind uint8

const (
	ReplyStatus ReplyKind = iota + 1
	ReplyError
	ReplyInt
	ReplyBulk
	ReplyNil
	ReplyArray
	// ReplyMap is HGETALL's reply: Elems alternate field and value; a
	// map in RESP3, an array in RESP2.
	ReplyMap
	// ReplyDouble is a score (ZSCORE, ZINCRBY): Bulk holds its text; a
	// double in RESP3, a bulk string in RESP2.
	ReplyDouble
	// ReplyScored is ZRANGE ... WITHSCORES' reply: Elems alternate member
	// (bulk) and score (double); in RESP3 an array of [member, score]
	// pairs, in RESP2 one flat array.
	ReplyScored
	// ReplySet is SMEMBERS' reply: a set in RESP3, an array in RESP2.
	ReplySet
)

// Reply is the answer to a command the engine served. The sidecar proxy
// renders it in RESP; the go-redis hook stores it in the command.
type Reply struct {
	Kind ReplyKind
	// Str is a status reply's text.
	Str string
	// Err is an error reply: a Redis error keeps its own text (and code),
	// anything else is rendered by the proxy behind "ERR ".
	Err   error
	Bulk  []byte
	Int   int64
	Elems []Reply
}

func errReply(err error) Reply { return Reply{Kind: ReplyError, Err: err} }

// Raw sends commands on keys the engine does not serve (the plain keys of
// a multi-key command, one command per key) on the caller's own path to
// Redis, after every command the caller sent before, and returns one reply
// per command, in order: an error reply, not a failure of Raw, when Redis
// or the connection fails. In a cluster each command goes to its key's
// node, so a multi-key command whose keys span slots is answered.
type Raw func(ctx context.Context, cmds [][][]byte) []Reply

// Observe is told every key access a served command made: the node agent
// must keep seeing a mitigated key, or its mitigation would end while it
// is hot. bytes is the value's size.
type Observe func(key string, reads, writes uint32, bytes int)

// Serve executes a command that Classify decided the engine serves (d.Op
// other than OpRaw), for the proxy and the go-redis hook alike, so both
// answer every command on a mitigated key the same way. args[0] is the
// command's name. raw sends the plain keys' commands of MGET, DEL, UNLINK,
// EXISTS and MSET; obs, if set, receives each access. ok is false when the
// command must be sent raw after all: a malformed form, which Redis
// answers with its own error without writing anything.
//
// Multi-key commands are not atomic across keys (one command per key),
// which docs/proxy.md states.
func (e *Engine) Serve(ctx context.Context, d Decision, args [][]byte, raw Raw, obs Observe) (r Reply, ok bool) {
	if obs == nil {
		obs = func(string, uint32, uint32, int) {}
	}
	switch d.Op {
	case OpRefuse:
		// A shed or refused command is demand all the same: the node
		// agents must go on seeing it, or the key would cool down, be
		// released and mitigated again (flapping).
		if k := refusedKey(d); k != "" {
			if d.Write {
				obs(k, 0, 1, 0)
			} else {
				obs(k, 1, 0, 0)
			}
		}
		return errReply(errors.New(d.Err)), true
	case OpGet, OpStrlen, OpType:
		k := string(args[1])
		if p := e.plan(k); d.Op == OpType && isMemberSplit(p) {
			t, err := e.memberType(ctx, p)
			obs(k, 1, 0, 0)
			if err != nil {
				return errReply(err), true
			}
			return Reply{Kind: ReplyStatus, Str: t}, true
		}
		v, found, err := e.Get(ctx, k)
		obs(k, 1, 0, len(v))
		switch {
		case err != nil:
			return errReply(err), true
		case d.Op == OpStrlen:
			return Reply{Kind: ReplyInt, Int: int64(len(v))}, true
		case d.Op == OpType && found:
			return Reply{Kind: ReplyStatus, Str: "string"}, true
		case d.Op == OpType:
			return Reply{Kind: ReplyStatus, Str: "none"}, true
		case !found:
			return Reply{Kind: ReplyNil}, true
		}
		return Reply{Kind: ReplyBulk, Bulk: v}, true
	case OpMGet:
		return e.mget(ctx, args[1:], raw, obs), true
	case OpExists:
		t := e.Table()
		return e.perKeyCount(ctx, args, func(k string) bool {
			return e.Lookup(k) && ClassOf(t.Lookup(k)) >= ClassCounter
		}, raw, obs), true
	case OpDel:
		return e.perKeyCount(ctx, args, e.Lookup, raw, obs), true
	case OpMSet:
		return e.mset(ctx, args, raw, obs), true
	case OpSet:
		return e.serveSet(ctx, args, obs)
	case OpIncr:
		return e.serveIncr(ctx, args, obs)
	case OpMembers:
		return e.ServeMembers(ctx, args, obs), true
	case OpExpire, OpTTL:
		k := string(args[1])
		var n int64
		var err error
		if d.Op == OpExpire {
			n, err = e.Expire(ctx, args)
			obs(k, 0, 1, 0)
		} else {
			n, err = e.TTL(ctx, args)
			obs(k, 1, 0, 0)
		}
		if err != nil {
			return errReply(err), true
		}
		return Reply{Kind: ReplyInt, Int: n}, true
	}
	return Reply{}, false
}

// refusedKey is the key a refused command is counted for: the shed key
// whose limiter refused it, or else the mitigated key whose move cannot
// serve it.
func refusedKey(d Decision) string {
	switch {
	case d.Shed != "":
		return d.Shed
	case d.Entry != nil:
		return d.Entry.Key
	}
	return ""
}

// serveSet maps SET, SETNX, SETEX and PSETEX to Set with options
// (SetForm). SETNX answers 1/0 where SET NX answers OK/nil.
func (e *Engine) serveSet(ctx context.Context, args [][]byte, obs Observe) (Reply, bool) {
	if len(args) < 3 {
		return Reply{}, false
	}
	rest := make([]any, len(args)-2)
	for i, a := range args[2:] {
		rest[i] = string(a)
	}
	val, opts, ok := SetForm(string(args[0]), rest)
	if !ok {
		return Reply{}, false
	}
	k := string(args[1])
	v := []byte(val.(string))
	written, err := e.Set(ctx, k, v, opts...)
	obs(k, 0, 1, len(v))
	switch {
	case err != nil:
		return errReply(err), true
	case eqFold(args[0], "SETNX") && written:
		return Reply{Kind: ReplyInt, Int: 1}, true
	case eqFold(args[0], "SETNX"):
		return Reply{Kind: ReplyInt, Int: 0}, true
	case !written:
		return Reply{Kind: ReplyNil}, true
	}
	return Reply{Kind: ReplyStatus, Str: "OK"}, true
}

// errNotAnInteger is Redis' own reply to INCRBY with a non-integer.
var errNotAnInteger = errors.New("ERR value is not an integer or out of range")

// serveIncr maps INCR, DECR, INCRBY and DECRBY to IncrBy.
func (e *Engine) serveIncr(ctx context.Context, args [][]byte, obs Observe) (Reply, bool) {
	name := args[0]
	by := eqFold(name, "INCRBY") || eqFold(name, "DECRBY")
	if by && len(args) != 3 || !by && len(args) != 2 {
		return Reply{}, false
	}
	n := int64(1)
	if by {
		v, err := strconv.ParseInt(string(args[2]), 10, 64)
		if err != nil {
			return errReply(errNotAnInteger), true
		}
		n = v
	}
	if name[0] == 'D' || name[0] == 'd' {
		n = -n
	}
	k := string(args[1])
	v, err := e.IncrBy(ctx, k, n)
	obs(k, 0, 1, 8)
	if err != nil {
		return errReply(err), true
	}
	return Reply{Kind: ReplyInt, Int: v}, true
}

// mget answers MGET: mitigated keys through Get (concurrently), the others
// with one raw GET each, assembled in order. A key holding another type
// reads as nil, as MGET answers; any other error answers the whole MGET.
func (e *Engine) mget(ctx context.Context, keys [][]byte, raw Raw, obs Observe) Reply {
	var rawIdx, engIdx []int
	var rawCmds [][][]byte
	for i, k := range keys {
		if e.Lookup(unsafeString(k)) {
			engIdx = append(engIdx, i)
			continue
		}
		rawIdx = append(rawIdx, i)
		rawCmds = append(rawCmds, [][]byte{[]byte("GET"), k})
	}
	var replies []Reply
	if len(rawCmds) > 0 {
		replies = raw(ctx, rawCmds)
	}
	type result struct {
		val   []byte
		found bool
		err   error
	}
	res := make([]result, len(engIdx))
	var wg sync.WaitGroup
	for j, i := range engIdx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, f, err := e.Get(ctx, string(keys[i]))
			res[j] = result{v, f, err}
		}()
	}
	wg.Wait()

	elems := make([]Reply, len(keys))
	for j, i := range rawIdx {
		rep := replies[j]
		switch {
		case rep.Kind == ReplyError && strings.HasPrefix(rep.Err.Error(), "WRONGTYPE"):
			elems[i] = Reply{Kind: ReplyNil}
		case rep.Kind == ReplyError:
			return rep
		case rep.Kind == ReplyBulk || rep.Kind == ReplyNil:
			elems[i] = rep
		default:
			return errReply(errors.New("ERR heatsink: unexpected reply to GET"))
		}
		obs(string(keys[i]), 1, 0, len(rep.Bulk))
	}
	for j, i := range engIdx {
		r := res[j]
		switch {
		case r.err != nil:
			return errReply(r.err)
		case r.found:
			elems[i] = Reply{Kind: ReplyBulk, Bulk: r.val}
		default:
			elems[i] = Reply{Kind: ReplyNil}
		}
		obs(string(keys[i]), 1, 0, len(r.val))
	}
	return Reply{Kind: ReplyArray, Elems: elems}
}

// perKeyCount answers DEL, UNLINK or EXISTS over several keys by adding up
// one command per key: through the engine (Del, or Get for EXISTS) for the
// keys viaEngine selects, raw for the others.
func (e *Engine) perKeyCount(ctx context.Context, args [][]byte, viaEngine func(key string) bool, raw Raw, obs Observe) Reply {
	exists := eqFold(args[0], "EXISTS")
	var reads, writes uint32 = 0, 1
	if exists {
		reads, writes = 1, 0
	}
	var rawCmds [][][]byte
	var rawKeys, engKeys [][]byte
	for _, k := range args[1:] {
		if viaEngine(unsafeString(k)) {
			engKeys = append(engKeys, k)
			continue
		}
		rawKeys = append(rawKeys, k)
		rawCmds = append(rawCmds, [][]byte{args[0], k})
	}
	var total int64
	if len(rawCmds) > 0 {
		for i, rep := range raw(ctx, rawCmds) {
			if rep.Kind != ReplyInt {
				if rep.Kind != ReplyError {
					rep = errReply(errors.New("ERR heatsink: unexpected reply to " + command.Upper(args[0])))
				}
				return rep
			}
			total += rep.Int
			obs(string(rawKeys[i]), reads, writes, 0)
		}
	}
	for _, kb := range engKeys {
		k := string(kb)
		var n int64
		var err error
		switch p := e.plan(k); {
		case exists && isMemberSplit(p):
			var found bool
			if found, err = e.exists(ctx, p); found {
				n = 1
			}
		case exists:
			var found bool
			if _, found, err = e.Get(ctx, k); found {
				n = 1
			}
		default:
			n, err = e.Del(ctx, k)
		}
		obs(k, reads, writes, 0)
		if err != nil {
			return errReply(err)
		}
		total += n
	}
	return Reply{Kind: ReplyInt, Int: total}
}

// mset answers MSET naming a key the engine must write: every mitigated
// pair through Set, the others with one raw SET each. It is not atomic
// across keys, and an error after some writes leaves those written. Split
// counters need integer values; that is checked before anything is
// written.
func (e *Engine) mset(ctx context.Context, args [][]byte, raw Raw, obs Observe) Reply {
	t := e.Table()
	var rawCmds [][][]byte
	var eng []int
	for i := 1; i+1 < len(args); i += 2 {
		k := args[i]
		if !e.Lookup(unsafeString(k)) {
			rawCmds = append(rawCmds, [][]byte{[]byte("SET"), k, args[i+1]})
			continue
		}
		if en := t.Lookup(unsafeString(k)); ClassOf(en) == ClassCounter {
			if _, err := strconv.ParseInt(string(args[i+1]), 10, 64); err != nil {
				return errReply(errors.New("ERR heatsink: MSET on a key mitigated by " + MitigationName(en) + " needs an integer value"))
			}
		}
		eng = append(eng, i)
	}
	if len(rawCmds) > 0 {
		for i, rep := range raw(ctx, rawCmds) {
			if rep.Kind == ReplyError {
				return rep
			}
			obs(string(rawCmds[i][1]), 0, 1, len(rawCmds[i][2]))
		}
	}
	for _, i := range eng {
		k := string(args[i])
		v := append([]byte(nil), args[i+1]...)
		_, err := e.Set(ctx, k, v)
		obs(k, 0, 1, len(v))
		if err != nil {
			return errReply(err)
		}
	}
	return Reply{Kind: ReplyStatus, Str: "OK"}
}

// Invalidates calls f with every mitigated key of args, for a command
// sent raw that may have written (d.Write): the local cache must drop
// them once Redis has applied the write.
func (e *Engine) Invalidates(args [][]byte, d Decision, f func(key string)) {
	if d.Class == ClassNone || !d.Write {
		return
	}
	command.ForEachKey(args, func(i int) bool {
		if k := unsafeString(args[i]); e.Lookup(k) {
			f(string(args[i]))
		}
		return true
	})
}

// Decide is Classify against the engine's current table: the decision the
// proxy and the go-redis hook take for a command naming a key of the
// table. A command that names no mitigated key gets ClassNone and OpRaw.
//
// A command on a shed key over its share (shed.go) is refused with
// routing.ShedError, inside MULTI too: the sidecar then aborts the
// transaction as Redis does for a command refused at queue time (EXEC
// answers EXECABORT, nothing runs), and the go-redis hook refuses the
// transaction whole, so a transaction never runs in part and is no way
// around the budget.
func (e *Engine) Decide(args [][]byte, inTx bool) Decision {
	ix := e.table.Load()
	t := ix.table
	d := Classify(args, func(k string) (*routing.Entry, bool) {
		if !e.Lookup(k) {
			return nil, false
		}
		return t.Lookup(k), true
	}, inTx)
	if !ix.shedding || d.Class == ClassNone || d.Op == OpRefuse {
		return d
	}
	if k := e.shed(ix, args, d.Write); k != "" {
		d.Op, d.Err, d.Shed = OpRefuse, routing.ShedError, k
	}
	return d
}

// Names reports whether a command names a key of the table, given its
// first key (c.FirstKey(args), nil for none): one map lookup for the first
// key and, only when the table is not empty, one per further key of a
// multi-key command. Keys not in the table never reach the engine.
func (e *Engine) Names(c command.Info, args [][]byte, first []byte) bool {
	if first == nil {
		return false
	}
	ix := e.table.Load()
	if len(ix.plans) == 0 {
		return false
	}
	if _, ok := ix.plans[unsafeString(first)]; ok {
		return true
	}
	if !c.MultiKey() {
		return false
	}
	found := false
	c.ForEachKey(args, func(i int) bool {
		_, found = ix.plans[unsafeString(args[i])]
		return !found
	})
	return found
}
