package engine

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// ZTop is the first n members in ZRANGE's order (ZREVRANGE's when rev),
// exactly, without reading the whole set. Each place is asked for its
// own first d members (d from n up); a member seen anywhere has its
// score completed from the places that did not list it (ZMSCORE). A
// member seen nowhere is in at most one place per layout (the base key,
// and its own shard in each generation), so it scores at most (at least,
// ascending) the sum over layouts of the greatest (least) d-th score of
// their places not read to their end, or 0 where it is absent. When the
// n-th merged member is strictly past that bound (or at it, named so
// that any unseen member reaching it sorts after it) no unseen member
// can precede it, and the first n are exact; otherwise d doubles. A place
// whose reply is shorter than d has been read whole, as has the base
// key's copy in a settled layout (checked in the first round's pipeline:
// copyCheck).
func (e *Engine) ZTop(ctx context.Context, key string, n int64, rev bool) ([]scored, error) {
	return e.ztop(ctx, key, n, rev, true)
}

// ztop is ZTop, using the base key's copy when useCopy.
func (e *Engine) ztop(ctx context.Context, key string, n int64, rev, useCopy bool) ([]scored, error) {
	if p := e.memberPlan(key, routing.KindZSet); e.folding(p) {
		// The rounds below read places at several moments (their first
		// d, then the scores they did not list): under a fold every place
		// is read whole, once, with its records (zallFolding).
		all, err := e.zallFolding(ctx, p, rev)
		if !errors.Is(err, errFoldRights) {
			return all[:min(int64(len(all)), n)], err
		}
	}
	keys, layout, known, check, err := e.zplaces(ctx, key, useCopy)
	if err != nil {
		return nil, err
	}
	past := func(a, b float64) bool { return zpast(rev, a, b) }
	for d := n; ; d *= 2 {
		reads, err := e.zfirst(ctx, keys, d, rev, check)
		if err != nil {
			return nil, err
		}
		if check.stale() {
			return e.ztop(ctx, key, n, rev, false)
		}
		check = nil                       // checked once: the copy was good when the shards were read
		seen := map[string]map[int]bool{} // member -> places that listed it
		m := map[string]float64{}
		zmerge(m, known)
		var open []int // places not read to their end
		best := map[int]zmost{}
		for i, c := range reads {
			zs := c.Val()
			zmerge(m, zs)
			for _, z := range zs {
				s := z.Member.(string)
				if seen[s] == nil {
					seen[s] = map[int]bool{}
				}
				seen[s][i] = true
			}
			if int64(len(zs)) < d {
				continue
			}
			open = append(open, i)
			last, name := zs[len(zs)-1].Score, zs[len(zs)-1].Member.(string)
			if !past(last, 0) {
				continue // absent (0) scores more there
			}
			best[layout[i]] = best[layout[i]].widen(last, name, rev)
		}
		bound, edge, edges := zbound(best, rev)
		for s := range m {
			if seen[s] == nil {
				seen[s] = map[int]bool{} // known from the base key's copy only
			}
		}
		if err := e.zcomplete(ctx, keys, open, seen, m); err != nil {
			return nil, err
		}
		all := zsorted(m, rev)
		if len(open) == 0 {
			return all[:min(int64(len(all)), n)], nil
		}
		if int64(len(all)) >= n {
			// Strictly past the bound, or at it with every unseen member
			// that could reach it named so that it sorts after the n-th
			// (only when every layout's bound is a d-th score: an absent
			// member's 0 puts no name on it).
			nth, name := all[n-1].score, all[n-1].member
			tieSafe := nth == bound && edges > 0 && edges == layouts(layout, open) && (rev && name >= edge || !rev && name <= edge)
			if past(nth, bound) || tieSafe {
				return all[:n], nil
			}
		}
	}
}

// zfirst asks each place for its own first d members (one pipeline; d 0
// reads it whole), with the check of the base key's copy queued in it.
func (e *Engine) zfirst(ctx context.Context, keys []string, d int64, rev bool, check *copyCheck) ([]*redis.ZSliceCmd, error) {
	reads := make([]*redis.ZSliceCmd, len(keys))
	// The reads' errors decide, not the marks' (copyCheck).
	_, _ = e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, k := range keys {
			if rev {
				reads[i] = pipe.ZRevRangeWithScores(ctx, k, 0, d-1)
			} else {
				reads[i] = pipe.ZRangeWithScores(ctx, k, 0, d-1)
			}
		}
		check.queue(ctx, pipe, keys)
		return nil
	})
	for _, c := range reads {
		if err := c.Err(); err != nil {
			e.m.upstreamErrors.Inc()
			return nil, err
		}
	}
	return reads, nil
}

// layouts counts the layouts of the open places.
func layouts(layout, open []int) int {
	seen := map[int]bool{}
	for _, i := range open {
		seen[layout[i]] = true
	}
	return len(seen)
}

// zpast reports whether score a is strictly past b in the read's order
// (descending when rev).
func zpast(rev bool, a, b float64) bool { return rev && a > b || !rev && a < b }

// zmost is, for one layout, the most an unseen member may score there
// (0: absent) and, where that is a d-th score, the name it must sort after
// (an unseen member reaching it is listed after the d-th in that place).
type zmost struct {
	score float64
	name  string
	set   bool
}

// widen is b with one place's d-th (score, name) taken in. Of places tying
// on the d-th score, the name an unseen member may still precede is the
// loosest: past the greatest d-th name (rev) or the least (ascending).
func (b zmost) widen(last float64, name string, rev bool) zmost {
	if !b.set || zpast(rev, last, b.score) || last == b.score && (rev && name > b.name || !rev && name < b.name) {
		return zmost{last, name, true}
	}
	return b
}

// zbound is the most an unseen member may score over every layout, the
// name it must sort after, and how many layouts put a name on the bound.
func zbound(best map[int]zmost, rev bool) (bound float64, edge string, edges int) {
	for _, b := range best {
		bound += b.score
		if edges == 0 || rev && b.name < edge || !rev && b.name > edge {
			edge = b.name
		}
		edges++
	}
	return bound, edge, edges
}

// zcomplete completes, in m, the scores of the members seen from the open
// places that did not list them (a place read whole lists all it has).
func (e *Engine) zcomplete(ctx context.Context, keys []string, open []int, seen map[string]map[int]bool, m map[string]float64) error {
	if len(open) == 0 {
		return nil
	}
	asks := make([][]string, len(open))
	for s, at := range seen {
		for j, i := range open {
			if !at[i] {
				asks[j] = append(asks[j], s)
			}
		}
	}
	cmds, err := e.rc().Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for j, i := range open {
			if len(asks[j]) > 0 {
				pipe.ZMScore(ctx, keys[i], asks[j]...)
			}
		}
		return nil
	})
	if err != nil {
		e.m.upstreamErrors.Inc()
		return err
	}
	c := 0
	for j := range open {
		if len(asks[j]) == 0 {
			continue
		}
		vals, err := cmds[c].(*redis.FloatSliceCmd).Result()
		c++
		if err != nil {
			return err
		}
		for x, v := range vals {
			m[asks[j][x]] += v // go-redis gives 0 for a member the place lacks
		}
	}
	return nil
}
