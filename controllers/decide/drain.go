package decide

import (
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// Drain plans the end of every split in the published table t, for when the
// manager must stop publishing (policy deleted, or switched to Observe).
// Dropping a split entry at once would strand the values in its shards: the
// data path would read only the base key. Instead each split key moves toward
// an unsplit exactly as after a cooldown (a Shards: 0 generation announced at
// the next safe boundary), keeps only its split (its other mitigations stop
// at once: they hold no data), and leaves the table once every retired
// generation is folded (Prune). An empty Entries means nothing is left to
// fold and the table may go.
//
// The result's Folds and NextCheck have the meaning of Decide's; State,
// Keys and the counters are empty.
func Drain(now time.Time, epochMillis int64, margin time.Duration, t *routing.Table) Output {
	var out Output
	if t == nil {
		return out
	}
	for _, e := range t.Entries {
		if e.Split == nil {
			continue
		}
		gens, folds, next := planGenerations(now, epochMillis, margin, e.Key, e.Split.Generations, 0)
		out.Folds = append(out.Folds, folds...)
		out.NextCheck = earliestNZ(out.NextCheck, next)
		if len(gens) == 0 {
			continue
		}
		out.Entries = append(out.Entries, routing.Entry{Key: e.Key, Source: e.Source, NotBefore: e.NotBefore, NotAfter: e.NotAfter,
			Split: &routing.Split{Generations: gens, Members: e.Split.Members, Kind: e.Split.Kind}})
	}
	return out
}

// Folded marks every generation of refs as folded, for Prune. Generations
// that were only ever decided, never published (Observe mode), took no
// writes: dropping them is their fold.
func Folded(refs []GenRef) map[GenRef]bool {
	m := make(map[GenRef]bool, len(refs))
	for _, r := range refs {
		m[r] = true
	}
	return m
}
