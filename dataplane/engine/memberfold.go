package engine

import (
	"context"
	"slices"
	"strconv"
)

// Sorted sets' and sets' reads while a fold may be in flight
// (foldread.go).

// zscoresFolding is ZScores under a fold: one ZMSCORE per place of the
// members it may hold, with its fold records.
func (e *Engine) zscoresFolding(ctx context.Context, p *plan, members []string) ([]float64, []bool, error) {
	reads := byPlace(p, "ZMSCORE", members)
	places, err := e.foldRead(ctx, p, reads, func(i int, r any) (map[string]string, error) {
		return pickFields(r, reads[i].fields), nil
	}, nil)
	if err != nil {
		return nil, nil, err
	}
	out, present := make([]float64, len(members)), make([]bool, len(members))
	for i, m := range members {
		for _, pl := range places {
			v, ok := pl[m]
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, nil, err
			}
			out[i] += f
			present[i] = true
		}
	}
	return out, present, nil
}

// zallFolding is ZAll under a fold: every place read whole with its fold
// records.
func (e *Engine) zallFolding(ctx context.Context, p *plan, rev bool) ([]scored, error) {
	places, err := e.foldRead(ctx, p, wholeReads(p, "ZRANGE", 0, -1, "WITHSCORES"), func(_ int, r any) (map[string]string, error) {
		return flatMap(r), nil
	}, nil)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, pl := range places {
		for member, v := range pl {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, err
			}
			m[member] += f
		}
	}
	return zsorted(m, rev), nil
}

// sismembersFolding is SIsMembers under a fold: one SMISMEMBER per place
// of the members it may hold, with its fold records.
func (e *Engine) sismembersFolding(ctx context.Context, p *plan, members []string) ([]bool, error) {
	reads := byPlace(p, "SMISMEMBER", members)
	places, err := e.foldRead(ctx, p, reads, func(i int, r any) (map[string]string, error) {
		flags, _ := r.([]any)
		m := map[string]string{}
		for j, v := range flags {
			if n, _ := v.(int64); n == 1 && j < len(reads[i].fields) {
				m[reads[i].fields[j]] = "1"
			}
		}
		return m, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(members))
	for i, m := range members {
		for _, pl := range places {
			_, held := pl[m]
			out[i] = out[i] || held
		}
	}
	return out, nil
}

// smembersFolding is SMembers under a fold: the union of every place read
// whole with its fold records, in byte order.
func (e *Engine) smembersFolding(ctx context.Context, p *plan) ([]string, error) {
	places, err := e.foldRead(ctx, p, wholeReads(p, "SMEMBERS"), func(_ int, r any) (map[string]string, error) {
		ms, _ := r.([]any)
		m := make(map[string]string, len(ms))
		for _, x := range ms {
			if s, ok := x.(string); ok {
				m[s] = "1"
			}
		}
		return m, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, pl := range places {
		for m := range pl {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
