package engine

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// A sorted set split by member (Split.Kind KindZSet; the rule and its
// proof are in docs/engine.md, Member split). It is a hash split by field
// with scores for values: a member m has one place per layout (the base
// key and m's shard, routing.MemberShard, in every listed generation with
// shards), its score is the sum of the scores its places hold, and it is
// in the set when some place holds it. ZINCRBY (and ZADD INCR of one
// member) adds to one place, the fold moves a retired place's score into
// the base key with +v/−v: sums are conserved, so every read that adds up
// a member's places is exact — exactly so while every score and increment
// is an integer below 2^53 (a leaderboard's points), since floating-point
// sums of fractions round by their order. ZREM removes a member from every
// place (removal.go). Setting a score (ZADD), popping (ZPOP..., whose reply
// and removal would have to be one step over the places), removing by
// range and ranges by score or lex are refused: a score set in one place
// would be added to the older scores of the others.

// zsetOps are the commands a sorted set split by member serves.
var zsetOps = map[string]hashOp{
	"ZSCORE":  {minArgs: 3, maxArgs: 3},
	"ZMSCORE": {minArgs: 3},
	"ZINCRBY": {minArgs: 4, maxArgs: 4},
	"ZREM":    {minArgs: 3},
	"ZADD": {minArgs: 4, form: func(args [][]byte) Op {
		if command.IsZAddIncr(args) {
			return OpMembers
		}
		return OpRefuse
	}},
	"ZCARD": {minArgs: 2, maxArgs: 2},
	"ZRANGE": {minArgs: 4, form: func(args [][]byte) Op {
		if command.ZRangeByRank(args) {
			return OpMembers
		}
		return OpRefuse
	}},
	"ZREVRANGE": {minArgs: 4, maxArgs: 5, form: withOption("WITHSCORES")},
	"ZRANK":     {minArgs: 3, maxArgs: 4, form: withOption("WITHSCORE")},
	"ZREVRANK":  {minArgs: 3, maxArgs: 4, form: withOption("WITHSCORE")},
}

// withOption serves a command whose one optional last argument is opt;
// anything else there is Redis' syntax error, answered from the base key.
func withOption(opt string) func(args [][]byte) Op {
	return func(args [][]byte) Op {
		if n := len(args); n == 5 && opt == "WITHSCORES" || n == 4 && opt == "WITHSCORE" {
			if !command.EqFold(args[n-1], opt) {
				return OpRaw
			}
		}
		return OpMembers
	}
}

// errNotFloat is Redis' reply to a score that does not parse.
var errNotFloat = errors.New("ERR value is not a valid float")

// scored is one member of a merged sorted set.
type scored struct {
	member string
	score  float64
}

// zless orders members as ZRANGE does (by score, then member bytes), or as
// ZREVRANGE does when rev (both reversed).
func zless(rev bool) func(a, b scored) int {
	return func(a, b scored) int {
		c := cmp.Compare(a.score, b.score)
		if c == 0 {
			c = strings.Compare(a.member, b.member)
		}
		if rev {
			return -c
		}
		return c
	}
}

// formatScore writes a score as Redis 7.0 does (%.17g; an integer score
// prints as an integer).
func formatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

func parseScore(s []byte) (float64, error) {
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(f) {
		return 0, errNotFloat
	}
	return f, nil
}

// ZIncrBy adds n to member's score in a sorted set split by member and
// returns the member's score: the reply of the one place written plus the
// other places' sum, cached as HIncrBy caches it (the same error bound,
// docs/engine.md).
func (e *Engine) ZIncrBy(ctx context.Context, key, member string, n float64) (float64, error) {
	p := e.memberPlan(key, routing.KindZSet)
	if p == nil {
		return e.rc().ZIncrBy(ctx, key, n, member).Result()
	}
	v, sum, err := incrMember(ctx, e, p, &p.zothers, member,
		func(write string) (otherSum[float64], error) { return e.zscorePlaces(ctx, p, member, write) },
		func(pipe redis.Pipeliner, write string) func() float64 {
			return pipe.ZIncrBy(ctx, write, n, member).Val
		})
	if err != nil {
		return 0, err
	}
	return v + sum, nil
}

// zscorePlaces sums member's score over its places but write
// (readOthers).
func (e *Engine) zscorePlaces(ctx context.Context, p *plan, member, write string) (otherSum[float64], error) {
	return readOthers(ctx, e, p, member, write,
		func(pipe redis.Pipeliner, k string) (redis.Cmder, func() (float64, bool, error)) {
			c := pipe.ZScore(ctx, k, member)
			return c, func() (float64, bool, error) { return c.Val(), c.Err() == nil, nil }
		},
		func(sum, v float64) (float64, error) { return sum + v, nil },
		foldedOthers[float64]{cmd: "ZMSCORE", parse: func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }})
}

// ZScores returns members' scores (present false for a member no place
// holds), each the sum of its places.
func (e *Engine) ZScores(ctx context.Context, key string, members []string) ([]float64, []bool, error) {
	p := e.memberPlan(key, routing.KindZSet)
	if e.folding(p) {
		if out, present, err := e.zscoresFolding(ctx, p, members); !errors.Is(err, errFoldRights) {
			return out, present, err
		}
	}
	out, present := make([]float64, len(members)), make([]bool, len(members))
	per := make([][]*redis.FloatCmd, len(members))
	_, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, m := range members {
			for _, k := range placesOf(p, key, m) {
				per[i] = append(per[i], pipe.ZScore(ctx, k, m))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		e.m.upstreamErrors.Inc()
		return nil, nil, err
	}
	for i := range members {
		for _, c := range per[i] {
			v, err := c.Result()
			switch {
			case errors.Is(err, redis.Nil):
			case err != nil:
				return nil, nil, err
			default:
				out[i] += v
				present[i] = true
			}
		}
	}
	return out, present, nil
}

// zmerge adds the scores of members read from places into m.
func zmerge(m map[string]float64, zs []redis.Z) {
	for _, z := range zs {
		m[z.Member.(string)] += z.Score
	}
}

// zsorted is m's members in ZRANGE's order (reversed when rev).
func zsorted(m map[string]float64, rev bool) []scored {
	out := make([]scored, 0, len(m))
	for k, v := range m {
		out = append(out, scored{k, v})
	}
	slices.SortFunc(out, zless(rev))
	return out
}

// ZAll is the whole sorted set in ZRANGE's order (reversed when rev),
// merged over every place: what ZCARD, ZRANK and ranges counted from the
// end read.
func (e *Engine) ZAll(ctx context.Context, key string, rev bool) ([]scored, error) {
	return e.zall(ctx, key, rev, true)
}

// zall is ZAll, using the base key's copy when useCopy.
func (e *Engine) zall(ctx context.Context, key string, rev, useCopy bool) ([]scored, error) {
	if p := e.memberPlan(key, routing.KindZSet); e.folding(p) {
		if all, err := e.zallFolding(ctx, p, rev); !errors.Is(err, errFoldRights) {
			return all, err
		}
	}
	keys, _, known, check, err := e.zplaces(ctx, key, useCopy)
	if err != nil {
		return nil, err
	}
	// d 0: every place read whole (ZRANGE 0 -1).
	reads, err := e.zfirst(ctx, keys, 0, false, check)
	if err != nil {
		return nil, err
	}
	if check.stale() {
		return e.zall(ctx, key, rev, false)
	}
	m := map[string]float64{}
	zmerge(m, known)
	for _, c := range reads {
		zmerge(m, c.Val())
	}
	return zsorted(m, rev), nil
}

// settledBase reports whether p's base key is written by nothing heatsink
// serves: the write generation is the last listed and the only one with
// shards (no fold credits the base key, no write goes to it). Then the
// base key changes only through writes made around heatsink, and a copy
// of it may be used for settledRefresh, as the others cache does.
func (e *Engine) settledBase(p *plan, now time.Time) bool {
	gens := p.entry.Split.Generations
	last := gens[len(gens)-1]
	if !p.entry.Active(now) || last.Shards == 0 || last.FromEpoch > routing.EpochAt(now, e.table.Load().table.EpochMillis) {
		return false
	}
	for _, g := range gens[:len(gens)-1] {
		if g.Shards > 0 {
			return false
		}
	}
	return true
}

// maxBaseCopy bounds the base key a sorted set's plan keeps a copy of.
const maxBaseCopy = 1024

// baseCopy is a sorted set's base key, whole, as read at a time.
type baseCopy struct {
	mu sync.Mutex
	zs []redis.Z
	at time.Time
	// until is the base key's expiry when read (zero: none).
	until time.Time
	// marks are the shards' removal marks read with it: a removal (ZREM,
	// DEL) anywhere changes the mark of a shard of the removed member, so a
	// reader that reads the shards' marks with the shards and finds others
	// drops the copy (copyCheck).
	marks string
}

// base returns p's base key whole from its copy when the layout is
// settled and the copy younger than settledRefresh, reading and keeping
// it when it holds at most maxBaseCopy members, with the shards' removal
// marks read with it; ok false when it is not to be copied (then it is
// read as any place).
func (e *Engine) base(ctx context.Context, p *plan) (zs []redis.Z, marks string, ok bool, err error) {
	now := e.clock.Now()
	if !e.settledBase(p, now) {
		return nil, "", false, nil
	}
	c := &p.zbase
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.zs != nil && now.Sub(c.at) < settledRefresh && alive(c.until) {
		return c.zs, c.marks, true, nil
	}
	var rd *redis.ZSliceCmd
	var at *redis.Cmd
	var mk []*redis.SliceCmd
	// The reads' own errors decide; PEXPIRETIME's is ignored (Redis
	// before 7 lacks it: what is read then lives its age alone), and so
	// are the marks' (then the copy lives its age alone too).
	_, _ = e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		rd = pipe.ZRangeWithScores(ctx, p.key, 0, maxBaseCopy)
		at = pipe.Do(ctx, "pexpiretime", p.key)
		for _, s := range p.readKeys[1:] {
			mk = append(mk, readMark(ctx, pipe, s))
		}
		return nil
	})
	if rd.Err() != nil { // PEXPIRETIME's error is ignored, as above
		e.m.upstreamErrors.Inc()
		return nil, "", false, rd.Err()
	}
	zs = rd.Val()
	if len(zs) > maxBaseCopy {
		return nil, "", false, nil
	}
	// The copy dies with the base key: a key given an expiry is not read
	// from a copy past it (alive).
	c.zs, c.at, c.until, c.marks = zs, now, expiryTime(at), joinMarks(mk)
	return zs, c.marks, true, nil
}

// joinMarks is the removal marks read, as one string to compare.
func joinMarks(mk []*redis.SliceCmd) string {
	var b strings.Builder
	for _, c := range mk {
		b.WriteString(markOf(c))
		b.WriteByte(' ')
	}
	return b.String()
}

// copyCheck checks, within a reader's own pipeline over the shards, that
// the base key's copy zplaces gave it is still good: no removal marked a
// shard since the copy was read. nil when no copy was used.
type copyCheck struct {
	p     *plan
	marks string
	read  []*redis.SliceCmd
}

// queue reads every shard's removal mark in pipe (shards: the keys
// zplaces gave, which are the shards when a copy is used).
func (c *copyCheck) queue(ctx context.Context, pipe redis.Pipeliner, shards []string) {
	if c == nil {
		return
	}
	for _, s := range shards {
		c.read = append(c.read, readMark(ctx, pipe, s))
	}
}

// stale reports whether the marks queue read are not the copy's, and then
// drops the copy: the reader reads again with the base key itself.
func (c *copyCheck) stale() bool {
	if c == nil || joinMarks(c.read) == c.marks {
		return false
	}
	c.p.zbase.mu.Lock()
	c.p.zbase.zs = nil
	c.p.zbase.mu.Unlock()
	return true
}

// zplaces is a sorted set's places for a whole-set read: the keys to
// read, the layout each belongs to (0 the base key, i+1 generation i: a
// member is in at most one place of each), and the base key's members
// when its copy stands in for it (unless useCopy is false), with the
// check of that copy a reader makes in its own pipeline.
func (e *Engine) zplaces(ctx context.Context, key string, useCopy bool) (keys []string, layout []int, known []redis.Z, check *copyCheck, err error) {
	p := e.memberPlan(key, routing.KindZSet)
	keys = allPlaces(p, key)
	layout = make([]int, 1, len(keys))
	if p != nil {
		for i, g := range p.gens {
			for range g {
				layout = append(layout, i+1)
			}
		}
	}
	if p == nil || !useCopy {
		return keys, layout, nil, nil, nil
	}
	zs, marks, ok, err := e.base(ctx, p)
	if err != nil || !ok {
		return keys, layout, nil, nil, err
	}
	return keys[1:], layout[1:], zs, &copyCheck{p: p, marks: marks}, nil
}

// ServeZSet serves an OpMembers command of a sorted set.
func (e *Engine) ServeZSet(ctx context.Context, args [][]byte, obs Observe) Reply {
	name := strings.ToUpper(string(args[0]))
	k := string(args[1])
	switch name {
	case "ZREM":
		members := make([]string, 0, len(args)-2)
		for _, a := range args[2:] {
			members = append(members, string(a))
		}
		n, err := e.ZRem(ctx, k, members)
		obs(k, 0, 1, 8*len(members))
		if err != nil {
			return errReply(err)
		}
		return Reply{Kind: ReplyInt, Int: n}
	case "ZINCRBY", "ZADD":
		incr, member := args[2], args[3]
		if name == "ZADD" { // ZADD key INCR increment member
			incr, member = args[3], args[4]
		}
		n, err := parseScore(incr)
		if err != nil {
			return errReply(err)
		}
		v, err := e.ZIncrBy(ctx, k, string(member), n)
		obs(k, 0, 1, 8)
		if err != nil {
			return errReply(err)
		}
		return double(v)
	case "ZSCORE", "ZMSCORE":
		members := make([]string, 0, len(args)-2)
		for _, a := range args[2:] {
			members = append(members, string(a))
		}
		vals, present, err := e.ZScores(ctx, k, members)
		obs(k, 1, 0, 8*len(members))
		if err != nil {
			return errReply(err)
		}
		out := make([]Reply, len(vals))
		for i := range vals {
			out[i] = Reply{Kind: ReplyNil}
			if present[i] {
				out[i] = double(vals[i])
			}
		}
		if name == "ZSCORE" {
			return out[0]
		}
		return Reply{Kind: ReplyArray, Elems: out}
	case "ZRANGE", "ZREVRANGE":
		rev, with := name == "ZREVRANGE", false
		for _, a := range args[4:] {
			rev = rev || command.EqFold(a, "REV")
			with = with || command.EqFold(a, "WITHSCORES")
		}
		start, err1 := strconv.ParseInt(string(args[2]), 10, 64)
		stop, err2 := strconv.ParseInt(string(args[3]), 10, 64)
		if err1 != nil || err2 != nil {
			return errReply(errNotAnInteger)
		}
		var got []scored
		var err error
		switch {
		case start >= 0 && stop >= 0 && start > stop:
		case start >= 0 && stop >= 0:
			got, err = e.ZTop(ctx, k, stop+1, rev)
			got = got[min(int64(len(got)), start):]
		default:
			got, err = e.ZAll(ctx, k, rev)
			got = rankRange(got, start, stop)
		}
		obs(k, 1, 0, 16*len(got))
		if err != nil {
			return errReply(err)
		}
		if !with {
			out := Reply{Kind: ReplyArray, Elems: make([]Reply, len(got))}
			for i, z := range got {
				out.Elems[i] = Reply{Kind: ReplyBulk, Bulk: []byte(z.member)}
			}
			return out
		}
		out := Reply{Kind: ReplyScored, Elems: make([]Reply, 0, 2*len(got))}
		for _, z := range got {
			out.Elems = append(out.Elems, Reply{Kind: ReplyBulk, Bulk: []byte(z.member)}, double(z.score))
		}
		return out
	}
	all, err := e.ZAll(ctx, k, name == "ZREVRANK")
	obs(k, 1, 0, 16*len(all))
	if err != nil {
		return errReply(err)
	}
	if name == "ZCARD" {
		return Reply{Kind: ReplyInt, Int: int64(len(all))}
	}
	// ZRANK, ZREVRANK [WITHSCORE]
	i := slices.IndexFunc(all, func(z scored) bool { return z.member == string(args[2]) })
	if i < 0 {
		return Reply{Kind: ReplyNil}
	}
	if len(args) == 4 {
		return Reply{Kind: ReplyArray, Elems: []Reply{{Kind: ReplyInt, Int: int64(i)}, double(all[i].score)}}
	}
	return Reply{Kind: ReplyInt, Int: int64(i)}
}

// rankRange is Redis' slice of a sorted set by rank, negative ranks
// counted from the end.
func rankRange(all []scored, start, stop int64) []scored {
	n := int64(len(all))
	if start < 0 {
		start = max(start+n, 0)
	}
	if stop < 0 {
		stop += n
	}
	if start > stop || start >= n {
		return nil
	}
	return all[start : min(stop, n-1)+1]
}

func double(f float64) Reply { return Reply{Kind: ReplyDouble, Bulk: []byte(formatScore(f))} }
