package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// Member split: a hash of counters spread over shards by field
// (routing.Split.Members; the rule and its proof are in docs/engine.md,
// Member split).
//
// A field f of logical key K has one place per layout: the base key K
// and, in every listed generation g with shards, the shard
// routing.MemberShard(f, g.Shards) of g. Its value is the sum of the
// integers its places hold, and it exists when some place holds it. The
// only write served is HINCRBY, which adds to one place (the write
// generation's shard of f, or K when that generation has no shards); the
// fold moves a retired place's value into K with the +v/−v protocol of
// counters. Sums are conserved by both, so every read that adds up a
// field's places is exact. HDEL removes the field from every place
// (removal.go). Plain HSET is refused: a value set in one place would be
// added to the older values of the others. DEL and the expiry commands
// act on every place at once (memberkeys.go, expire.go).

// hashOp describes one hash command a member split serves.
type hashOp struct {
	// minArgs and maxArgs bound len(args) (maxArgs 0: unbounded).
	minArgs, maxArgs int
	// form, when set, decides a well-formed invocation's Op by its
	// options: OpMembers for a form the split serves, OpRefuse for one it
	// cannot (ZADD without INCR, ZRANGE BYSCORE), OpRaw for one Redis
	// rejects by itself (a syntax error, answered from the base key).
	form func(args [][]byte) Op
}

func (o hashOp) wellFormed(n int) bool {
	return n >= o.minArgs && (o.maxArgs == 0 || n <= o.maxArgs)
}

// memberOps are the commands a member split of kind k serves.
func memberOps(k routing.MemberKind) map[string]hashOp {
	switch k {
	case routing.KindZSet:
		return zsetOps
	case routing.KindSet:
		return setOps
	}
	return hashOps
}

// hashOps are the commands a hash split by field serves, with their
// arity.
var hashOps = map[string]hashOp{
	"HGET":    {minArgs: 3, maxArgs: 3},
	"HMGET":   {minArgs: 3},
	"HEXISTS": {minArgs: 3, maxArgs: 3},
	"HSTRLEN": {minArgs: 3, maxArgs: 3},
	"HGETALL": {minArgs: 2, maxArgs: 2},
	"HKEYS":   {minArgs: 2, maxArgs: 2},
	"HVALS":   {minArgs: 2, maxArgs: 2},
	"HLEN":    {minArgs: 2, maxArgs: 2},
	"HINCRBY": {minArgs: 4, maxArgs: 4},
	"HDEL":    {minArgs: 3},
}

// errHashNotInteger is Redis' own reply to HINCRBY on a field that does
// not hold an integer.
var errHashNotInteger = errors.New("ERR hash value is not an integer")

// errHashOverflow is Redis' own reply to an HINCRBY that would overflow.
var errHashOverflow = errors.New("ERR increment or decrement would overflow")

// memberPlaces lists the places of field in p's layout: the base key
// first, then the field's shard in each generation with shards, in table
// order.
func memberPlaces(p *plan, field string) []string {
	out := make([]string, 1, 1+len(p.gens))
	out[0] = p.key
	for i, g := range p.entry.Split.Generations {
		if g.Shards > 0 {
			out = append(out, p.gens[i][routing.MemberShard(field, int(g.Shards))])
		}
	}
	return out
}

// memberPlan is key's plan when it is a member split of kind k, else nil
// (the key left the table, or changed mitigation, between Classify and
// the engine's serving it: the command goes to the base key alone).
func (e *Engine) memberPlan(key string, k routing.MemberKind) *plan {
	p := e.plan(key)
	if p == nil || p.entry.Split == nil || !p.entry.Split.Members || p.entry.Split.Kind != k {
		return nil
	}
	return p
}

// placesOf is memberPlaces, or the base key alone without a plan.
func placesOf(p *plan, key, member string) []string {
	if p == nil {
		return []string{key}
	}
	return memberPlaces(p, member)
}

// allPlaces are every place of a member split (the base key and every
// shard of every listed generation), or the base key alone without a
// plan: what a whole-collection read merges.
func allPlaces(p *plan, key string) []string {
	if p == nil {
		return []string{key}
	}
	return p.readKeys
}

// without is keys but k.
func without(keys []string, k string) []string {
	out := make([]string, 0, len(keys))
	for _, x := range keys {
		if x != k {
			out = append(out, x)
		}
	}
	return out
}

// memberWritePlace is where an HINCRBY of field goes now: its shard in the
// write generation, or the base key when that generation has no shards,
// none has started, or the entry is outside its NotBefore/NotAfter.
func (e *Engine) memberWritePlace(p *plan, field string, now time.Time) string {
	if !p.entry.Active(now) {
		return p.key
	}
	return e.writePlace(p, now, func(shards int) int { return routing.MemberShard(field, shards) })
}

// HIncrBy adds n to field of a member-split hash and returns the field's
// value. The increment goes to one place; the value is what that place
// returned plus the other places' sum (cached for TotalRefresh). A field
// that holds a non-integer in another place is refused as Redis refuses
// it, without writing.
func (e *Engine) HIncrBy(ctx context.Context, key, field string, n int64) (int64, error) {
	p := e.memberPlan(key, routing.KindHash)
	if p == nil {
		return e.rc().HIncrBy(ctx, key, field, n).Result()
	}
	v, sum, err := incrMember(ctx, e, p, &p.others, field,
		func(write string) (otherSum[int64], error) { return e.otherPlaces(ctx, p, field, write) },
		func(pipe redis.Pipeliner, write string) func() int64 { return pipe.HIncrBy(ctx, write, field, n).Val })
	if err != nil {
		return 0, err
	}
	total, overflow := addInt64(v, sum)
	if overflow {
		// Applied already (a retry would count it twice): the sum is
		// past what Redis can hold, which it would have refused.
		return 0, errHashOverflow
	}
	return total, nil
}

// otherPlaces sums field over its places but write (readOthers),
// refusing a non-integer as HINCRBY does.
func (e *Engine) otherPlaces(ctx context.Context, p *plan, field, write string) (otherSum[int64], error) {
	return readOthers(ctx, e, p, field, write,
		func(pipe redis.Pipeliner, k string) (redis.Cmder, func() (int64, bool, error)) {
			c := pipe.HMGet(ctx, k, field)
			return c, func() (int64, bool, error) {
				v, ok := c.Val()[0].(string)
				if !ok {
					return 0, false, nil
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, false, errHashNotInteger
				}
				return n, true, nil
			}
		},
		func(sum, n int64) (int64, error) {
			if total, overflow := addInt64(sum, n); !overflow {
				return total, nil
			}
			return 0, errHashOverflow
		},
		foldedOthers[int64]{cmd: "HMGET", parse: func(v string) (int64, error) {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, errHashNotInteger
			}
			return n, nil
		}})
}

// memberValue merges a field's values over its places: absent when none
// holds it, the one value as it is when one does (a value written before
// the split need not be an integer), their integer sum otherwise.
func memberValue(vals []string) (string, bool, error) {
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
		return vals[0], true, nil
	}
	var sum int64
	for _, v := range vals {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", false, errors.New("ERR heatsink: a field of a hash split by field holds a non-integer in several shards")
		}
		var overflow bool
		if sum, overflow = addInt64(sum, n); overflow {
			return "", false, errHashOverflow
		}
	}
	return strconv.FormatInt(sum, 10), true, nil
}

// HMGet returns fields of a member-split hash (present false for a field
// no place holds), reading each field's places in one pipeline.
func (e *Engine) HMGet(ctx context.Context, key string, fields []string) (vals []string, present []bool, err error) {
	p := e.memberPlan(key, routing.KindHash)
	if p == nil {
		return e.hmgetRaw(ctx, key, fields)
	}
	if e.folding(p) {
		if vals, present, err = e.hmgetFolding(ctx, p, fields); !errors.Is(err, errFoldRights) {
			return vals, present, err
		}
	}
	// Each field has its own places: read every field from every place
	// it may be in, all in one pipeline.
	vals = make([]string, len(fields))
	present = make([]bool, len(fields))
	type places struct {
		cmds []*redis.StringCmd
	}
	per := make([]places, len(fields))
	_, perr := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, f := range fields {
			for _, k := range memberPlaces(p, f) {
				per[i].cmds = append(per[i].cmds, pipe.HGet(ctx, k, f))
			}
		}
		return nil
	})
	if perr != nil && !errors.Is(perr, redis.Nil) {
		e.m.upstreamErrors.Inc()
		return nil, nil, perr
	}
	for i := range fields {
		var got []string
		for _, c := range per[i].cmds {
			v, err := c.Result()
			switch {
			case errors.Is(err, redis.Nil):
			case err != nil:
				return nil, nil, err
			default:
				got = append(got, v)
			}
		}
		vals[i], present[i], err = memberValue(got)
		if err != nil {
			return nil, nil, err
		}
	}
	return vals, present, nil
}

func (e *Engine) hmgetRaw(ctx context.Context, key string, fields []string) ([]string, []bool, error) {
	r, err := e.rc().HMGet(ctx, key, fields...).Result()
	if err != nil {
		return nil, nil, err
	}
	vals, present := make([]string, len(r)), make([]bool, len(r))
	for i, v := range r {
		vals[i], present[i] = v.(string)
	}
	return vals, present, nil
}

// HGetAll returns a member-split hash's fields and values, merged over
// every place (the base key and every shard of every listed generation),
// fields in byte order.
func (e *Engine) HGetAll(ctx context.Context, key string) (fields, vals []string, err error) {
	p := e.memberPlan(key, routing.KindHash)
	if e.folding(p) {
		if fields, vals, err = e.hgetallFolding(ctx, p); !errors.Is(err, errFoldRights) {
			return fields, vals, err
		}
	}
	keys := allPlaces(p, key)
	cmds, perr := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, k := range keys {
			pipe.HGetAll(ctx, k)
		}
		return nil
	})
	if perr != nil {
		e.m.upstreamErrors.Inc()
		return nil, nil, perr
	}
	places := make([]map[string]string, len(cmds))
	for i, c := range cmds {
		if places[i], err = c.(*redis.MapStringStringCmd).Result(); err != nil {
			return nil, nil, err
		}
	}
	return mergeFields(places)
}

// mergeFields merges the places' fields of a member-split hash: each
// field's value over its places (memberValue), fields sorted. Redis' own
// order is unspecified but the same for HKEYS, HVALS and HGETALL of an
// unchanged hash, which two reads of the places' maps (unordered) would
// not be.
func mergeFields(places []map[string]string) (fields, vals []string, err error) {
	got := map[string][]string{}
	for _, m := range places {
		for f, v := range m {
			if _, seen := got[f]; !seen {
				fields = append(fields, f)
			}
			got[f] = append(got[f], v)
		}
	}
	slices.Sort(fields)
	vals = make([]string, len(fields))
	for i, f := range fields {
		if vals[i], _, err = memberValue(got[f]); err != nil {
			return nil, nil, err
		}
	}
	return fields, vals, nil
}

// ServeMembers serves an OpMembers command (Classify checked its arity
// and form) by the key's kind of member split.
func (e *Engine) ServeMembers(ctx context.Context, args [][]byte, obs Observe) Reply {
	switch strings.ToUpper(string(args[0]))[0] {
	case 'Z':
		return e.ServeZSet(ctx, args, obs)
	case 'S':
		return e.ServeSet(ctx, args, obs)
	}
	return e.ServeHash(ctx, args, obs)
}

// ServeHash serves an OpMembers command of a hash.
func (e *Engine) ServeHash(ctx context.Context, args [][]byte, obs Observe) Reply {
	name := strings.ToUpper(string(args[0]))
	k := string(args[1])
	fields := make([]string, 0, len(args))
	for _, a := range args[2:] {
		fields = append(fields, string(a))
	}
	switch name {
	case "HDEL":
		n, err := e.HDel(ctx, k, fields)
		obs(k, 0, 1, 8*len(fields))
		if err != nil {
			return errReply(err)
		}
		return Reply{Kind: ReplyInt, Int: n}
	case "HINCRBY":
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return errReply(errNotAnInteger)
		}
		v, err := e.HIncrBy(ctx, k, fields[0], n)
		obs(k, 0, 1, 8)
		if err != nil {
			return errReply(err)
		}
		return Reply{Kind: ReplyInt, Int: v}
	case "HGET", "HMGET", "HEXISTS", "HSTRLEN":
		vals, present, err := e.HMGet(ctx, k, fields)
		size := 0
		for _, v := range vals {
			size += len(v)
		}
		obs(k, 1, 0, size)
		if err != nil {
			return errReply(err)
		}
		switch name {
		case "HGET":
			if !present[0] {
				return Reply{Kind: ReplyNil}
			}
			return Reply{Kind: ReplyBulk, Bulk: []byte(vals[0])}
		case "HEXISTS":
			return Reply{Kind: ReplyInt, Int: boolInt(present[0])}
		case "HSTRLEN":
			return Reply{Kind: ReplyInt, Int: int64(len(vals[0]))}
		}
		out := Reply{Kind: ReplyArray, Elems: make([]Reply, len(vals))}
		for i, v := range vals {
			out.Elems[i] = Reply{Kind: ReplyNil}
			if present[i] {
				out.Elems[i] = Reply{Kind: ReplyBulk, Bulk: []byte(v)}
			}
		}
		return out
	}
	fs, vals, err := e.HGetAll(ctx, k)
	size := 0
	for i := range fs {
		size += len(fs[i]) + len(vals[i])
	}
	obs(k, 1, 0, size)
	if err != nil {
		return errReply(err)
	}
	switch name {
	case "HLEN":
		return Reply{Kind: ReplyInt, Int: int64(len(fs))}
	case "HKEYS":
		return bulks(fs)
	case "HVALS":
		return bulks(vals)
	}
	out := Reply{Kind: ReplyMap, Elems: make([]Reply, 0, 2*len(fs))}
	for i := range fs {
		out.Elems = append(out.Elems, Reply{Kind: ReplyBulk, Bulk: []byte(fs[i])}, Reply{Kind: ReplyBulk, Bulk: []byte(vals[i])})
	}
	return out
}

func bulks(ss []string) Reply {
	out := Reply{Kind: ReplyArray, Elems: make([]Reply, len(ss))}
	for i, s := range ss {
		out.Elems[i] = Reply{Kind: ReplyBulk, Bulk: []byte(s)}
	}
	return out
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// addInt64 is a+b and whether it overflowed.
func addInt64(a, b int64) (int64, bool) {
	s := a + b
	if b > 0 && a > math.MaxInt64-b || b < 0 && a < math.MinInt64-b {
		return 0, true
	}
	return s, false
}

// hmgetFolding is HMGet while a fold may be in flight: one read per
// place of the fields it may hold, with its fold records (foldRead).
func (e *Engine) hmgetFolding(ctx context.Context, p *plan, fields []string) ([]string, []bool, error) {
	reads := byPlace(p, "HMGET", fields)
	places, err := e.foldRead(ctx, p, reads, func(i int, r any) (map[string]string, error) {
		return pickFields(r, reads[i].fields), nil
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	vals, present := make([]string, len(fields)), make([]bool, len(fields))
	for i, f := range fields {
		var got []string
		for _, m := range places {
			if v, ok := m[f]; ok {
				got = append(got, v)
			}
		}
		if vals[i], present[i], err = memberValue(got); err != nil {
			return nil, nil, err
		}
	}
	return vals, present, nil
}

// hgetallFolding is HGetAll while a fold may be in flight (foldRead).
func (e *Engine) hgetallFolding(ctx context.Context, p *plan) (fields, vals []string, err error) {
	places, err := e.foldRead(ctx, p, wholeReads(p, "HGETALL"), func(_ int, r any) (map[string]string, error) {
		return flatMap(r), nil
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	return mergeFields(places)
}
