package decide

import (
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// AnnounceEpoch is the first epoch whose start is at least margin after now.
// A change of split cardinality is announced for that epoch, so every sidecar
// has received the new table (and clock skew is absorbed) before anyone
// writes to the new generation.
func AnnounceEpoch(now time.Time, epochMillis int64, margin time.Duration) int64 {
	n := routing.EpochAt(now.Add(margin), epochMillis)
	if routing.EpochStart(n, epochMillis).Before(now.Add(margin)) {
		n++
	}
	return n
}

// GenRef names one split generation of one key.
type GenRef struct {
	Key       string
	FromEpoch int64
}

// Generation finds the split generation ref names among entries; ok is
// false once the key is unsplit or the generation has left the table.
func Generation(entries []routing.Entry, ref GenRef) (routing.Generation, bool) {
	t := routing.Table{Entries: entries}
	e := t.Lookup(ref.Key)
	if e == nil || e.Split == nil {
		return routing.Generation{}, false
	}
	for _, g := range e.Split.Generations {
		if g.FromEpoch == ref.FromEpoch {
			return g, true
		}
	}
	return routing.Generation{}, false
}

// planGenerations moves a key's split generations toward desired shards
// (0 = unsplit). Announced generations are never changed once their start is
// closer than margin, because a sidecar may already write to them; a future
// one far enough ahead is replaced instead of stacking a new one behind it.
// It returns the generations, the retired ones that still need folding, and
// the next time the plan changes by itself (zero if never).
func planGenerations(now time.Time, epochMillis int64, margin time.Duration, key string, gens []routing.Generation, desired int32) ([]routing.Generation, []GenRef, time.Time) {
	out := append([]routing.Generation(nil), gens...)
	last := int32(0)
	if len(out) > 0 {
		last = out[len(out)-1].Shards
	}
	if last != desired {
		a := AnnounceEpoch(now, epochMillis, margin)
		switch {
		case len(out) == 0:
			out = append(out, routing.Generation{FromEpoch: a, Shards: desired})
		case out[len(out)-1].FromEpoch >= a:
			// Not yet taking writes anywhere: amend, or withdraw when it
			// would only repeat the layout before it.
			prev := int32(0)
			if len(out) > 1 {
				prev = out[len(out)-2].Shards
			}
			if prev == desired {
				out = out[:len(out)-1]
			} else {
				out[len(out)-1].Shards = desired
			}
		default:
			out = append(out, routing.Generation{FromEpoch: a, Shards: desired})
		}
	}

	// Retire generations that a newer, in-effect generation has replaced for
	// at least margin (late writers with slow clocks or old tables are done).
	e := routing.EpochAt(now, epochMillis)
	var next time.Time
	var folds []GenRef
	keep := out[:0]
	for i, g := range out {
		if i+1 < len(out) {
			succ := routing.EpochStart(out[i+1].FromEpoch, epochMillis)
			retireAt := succ.Add(margin)
			if out[i+1].FromEpoch <= e && !now.Before(retireAt) {
				if g.Shards == 0 {
					continue // wrote to the base key: nothing to fold
				}
				folds = append(folds, GenRef{Key: key, FromEpoch: g.FromEpoch})
			} else {
				next = earliest(next, retireAt)
			}
		}
		if g.FromEpoch > e {
			next = earliest(next, routing.EpochStart(g.FromEpoch, epochMillis))
		}
		keep = append(keep, g)
	}
	out = keep
	// A lone unsplit generation in effect is the same as no split at all.
	if len(out) == 1 && out[0].Shards == 0 && out[0].FromEpoch <= e {
		out = nil
	}
	return out, folds, next
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// Rescale re-expresses a table's split generations in epochs of epochMillis,
// for when the policy's split.epoch changes. Each generation keeps its
// wall-clock start, rounded down to the new epoch containing it; generations
// that would share an epoch are pushed one epoch apart, keeping their order.
// No increment is lost by the move: readers sum every listed generation, so a
// write landing in a neighbouring generation is still counted, and retirement
// then follows the new epochs. A table already in epochMillis is returned as
// is.
func Rescale(t *routing.Table, epochMillis int64) *routing.Table {
	if t == nil || t.EpochMillis == epochMillis || t.EpochMillis <= 0 || epochMillis <= 0 {
		return t
	}
	out := *t
	out.EpochMillis = epochMillis
	out.Entries = make([]routing.Entry, len(t.Entries))
	for i, e := range t.Entries {
		if e.Split != nil {
			gens := make([]routing.Generation, len(e.Split.Generations))
			for j, g := range e.Split.Generations {
				from := routing.EpochAt(routing.EpochStart(g.FromEpoch, t.EpochMillis), epochMillis)
				if j > 0 && from <= gens[j-1].FromEpoch {
					from = gens[j-1].FromEpoch + 1
				}
				gens[j] = routing.Generation{FromEpoch: from, Shards: g.Shards}
			}
			e.Split = &routing.Split{Generations: gens, Members: e.Split.Members, Kind: e.Split.Kind}
		}
		out.Entries[i] = e
	}
	return &out
}

// Prune removes folded generations (every shard read 0 after the grace
// period) from entries, drops a split reduced to a lone unsplit generation
// and an entry left with no mitigation. It returns a new slice.
func Prune(now time.Time, epochMillis int64, entries []routing.Entry, folded map[GenRef]bool) []routing.Entry {
	if len(folded) == 0 {
		return entries
	}
	e := routing.EpochAt(now, epochMillis)
	out := make([]routing.Entry, 0, len(entries))
	for _, en := range entries {
		if en.Split != nil {
			var gens []routing.Generation
			for _, g := range en.Split.Generations {
				if !folded[GenRef{Key: en.Key, FromEpoch: g.FromEpoch}] {
					gens = append(gens, g)
				}
			}
			if len(gens) == 1 && gens[0].Shards == 0 && gens[0].FromEpoch <= e {
				gens = nil
			}
			if len(gens) == 0 {
				en.Split, en.PreAggregate = nil, nil
			} else {
				en.Split = &routing.Split{Generations: gens, Members: en.Split.Members, Kind: en.Split.Kind}
			}
		}
		if hasMitigation(&en) {
			out = append(out, en)
		}
	}
	return out
}
