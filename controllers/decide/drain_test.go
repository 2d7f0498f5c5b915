package decide

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/routing"
)

func TestDrain(t *testing.T) {
	const em = 60000
	margin := 10 * time.Second
	at := func(epoch int64, off time.Duration) time.Time { return routing.EpochStart(epoch, em).Add(off) }
	split := func(gens ...routing.Generation) *routing.Split { return &routing.Split{Generations: gens} }
	table := &routing.Table{SchemaVersion: routing.SchemaVersion, EpochMillis: em, Entries: []routing.Entry{
		{Key: "a", Source: routing.SourceDetected, Coalesce: true, Split: split(routing.Generation{FromEpoch: 100, Shards: 4}),
			PreAggregate: &routing.PreAggregate{FlushMillis: 100}},
		{Key: "b", Coalesce: true, Replicate: &routing.Replicate{Replicas: 3}},
	}}
	for _, tc := range []struct {
		name      string
		now       time.Time
		t         *routing.Table
		entries   []routing.Entry
		folds     []GenRef
		nextCheck time.Time
	}{
		{name: "no table", now: at(100, 0)},
		{name: "unsplit announced at the next safe boundary; other mitigations stop",
			now: at(100, 30*time.Second), t: table,
			entries: []routing.Entry{{Key: "a", Source: routing.SourceDetected,
				Split: split(routing.Generation{FromEpoch: 100, Shards: 4}, routing.Generation{FromEpoch: 101, Shards: 0})}},
			nextCheck: at(101, 0)},
		{name: "too close to the boundary: one more epoch",
			now: at(100, 55*time.Second), t: table,
			entries: []routing.Entry{{Key: "a", Source: routing.SourceDetected,
				Split: split(routing.Generation{FromEpoch: 100, Shards: 4}, routing.Generation{FromEpoch: 102, Shards: 0})}},
			nextCheck: at(102, 0)},
		{name: "unsplit in effect, within the margin: wait",
			now: at(101, 5*time.Second), t: &routing.Table{EpochMillis: em, Entries: []routing.Entry{{Key: "a",
				Split: split(routing.Generation{FromEpoch: 100, Shards: 4}, routing.Generation{FromEpoch: 101, Shards: 0})}}},
			entries: []routing.Entry{{Key: "a",
				Split: split(routing.Generation{FromEpoch: 100, Shards: 4}, routing.Generation{FromEpoch: 101, Shards: 0})}},
			nextCheck: at(101, margin)},
		{name: "past the margin: fold the retired generation",
			now: at(101, margin), t: &routing.Table{EpochMillis: em, Entries: []routing.Entry{{Key: "a",
				Split: split(routing.Generation{FromEpoch: 100, Shards: 4}, routing.Generation{FromEpoch: 101, Shards: 0})}}},
			entries: []routing.Entry{{Key: "a",
				Split: split(routing.Generation{FromEpoch: 100, Shards: 4}, routing.Generation{FromEpoch: 101, Shards: 0})}},
			folds: []GenRef{{Key: "a", FromEpoch: 100}}},
		{name: "a split announced but not yet in effect is withdrawn: it took no writes",
			now: at(100, 0), t: &routing.Table{EpochMillis: em, Entries: []routing.Entry{{Key: "a",
				Split: split(routing.Generation{FromEpoch: 101, Shards: 4})}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Drain(tc.now, em, margin, tc.t)
			if diff := cmp.Diff(tc.entries, out.Entries); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.folds, out.Folds); diff != "" {
				t.Errorf("folds (-want +got):\n%s", diff)
			}
			if !out.NextCheck.Equal(tc.nextCheck) {
				t.Errorf("next check %v, want %v", out.NextCheck, tc.nextCheck)
			}
			// After the folds, Prune leaves nothing.
			if len(tc.folds) > 0 {
				if left := Prune(tc.now, em, out.Entries, Folded(out.Folds)); len(left) != 0 {
					t.Errorf("after folding: %+v", left)
				}
			}
		})
	}
}
