package decide

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/routing"
)

func TestFills(t *testing.T) {
	margin := 10 * time.Second
	rep := func(key string, n int32) routing.Entry {
		return routing.Entry{Key: key, Replicate: &routing.Replicate{Replicas: n, TTLMillis: 60000}}
	}
	table := func(es ...routing.Entry) *routing.Table { return &routing.Table{Entries: es} }
	fill := func(key string, n int) Fill { return Fill{Key: key, Replicas: n, TTL: time.Minute} }
	refill := func(key string, n int) Fill { f := fill(key, n); f.Refill = true; return f }
	// The event "bf" pre-warms key "a" from t0 and starts an hour later.
	bf := []ScheduledKey{{Key: "a", Schedule: "bf", PrewarmAt: t0, Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour)}}
	for name, tc := range map[string]struct {
		now       time.Time
		current   *routing.Table
		entries   []routing.Entry
		scheduled []ScheduledKey
		due       map[string]int
		want      []Fill
	}{
		"nothing replicated": {now: t0, entries: []routing.Entry{{Key: "a", Coalesce: true}}},
		"first table: every replicated key is new": {now: t0,
			entries: []routing.Entry{rep("a", 2), {Key: "b", Coalesce: true}, rep("c", 3)},
			want:    []Fill{fill("a", 2), fill("c", 3)}},
		"a key newly replicated": {now: t0, current: table(routing.Entry{Key: "a", Coalesce: true}),
			entries: []routing.Entry{rep("a", 2)}, want: []Fill{fill("a", 2)}},
		"resized": {now: t0, current: table(rep("a", 2)),
			entries: []routing.Entry{rep("a", 4)}, want: []Fill{fill("a", 4)}},
		"a new TTL is a change": {now: t0,
			current: table(routing.Entry{Key: "a", Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 1000}}),
			entries: []routing.Entry{rep("a", 2)}, want: []Fill{fill("a", 2)}},
		"unchanged and no refill due": {now: t0, current: table(rep("a", 2)), entries: []routing.Entry{rep("a", 2)}},
		"unchanged with its refill due": {now: t0, current: table(rep("a", 2)), entries: []routing.Entry{rep("a", 2)},
			due: map[string]int{"a": 2}, want: []Fill{refill("a", 2)}},
		"a refill booked for another replica count is not done": {now: t0, current: table(rep("a", 4)),
			entries: []routing.Entry{rep("a", 4)}, due: map[string]int{"a": 2}},
		"a changed key with a refill due is filled as a change": {now: t0, current: table(rep("a", 2)),
			entries: []routing.Entry{rep("a", 4)}, due: map[string]int{"a": 4}, want: []Fill{fill("a", 4)}},
		"a refill due of a key no longer replicated": {now: t0, current: table(rep("a", 2)),
			entries: []routing.Entry{{Key: "a", Coalesce: true}}, due: map[string]int{"a": 2}},
		"before its pre-warm a scheduled key is not refilled": {now: t0.Add(-time.Second), current: table(rep("a", 8)),
			entries: []routing.Entry{rep("a", 8)}, scheduled: bf},
		"pre-warming from PrewarmAt": {now: t0, current: table(rep("a", 8)),
			entries: []routing.Entry{rep("a", 8)}, scheduled: bf, want: []Fill{fill("a", 8)}},
		"pre-warming until the margin after the start": {now: t0.Add(time.Hour + margin), current: table(rep("a", 8)),
			entries: []routing.Entry{rep("a", 8)}, scheduled: bf, want: []Fill{fill("a", 8)}},
		"past the margin after the start: only refills": {now: t0.Add(time.Hour + margin + time.Millisecond), current: table(rep("a", 8)),
			entries: []routing.Entry{rep("a", 8)}, scheduled: bf},
		"pre-warming concerns the schedule's keys only": {now: t0, current: table(rep("a", 8), rep("b", 2)),
			entries: []routing.Entry{rep("a", 8), rep("b", 2)}, scheduled: bf, want: []Fill{fill("a", 8)}},
		"in the order of the entries": {now: t0, current: table(rep("b", 2)),
			entries: []routing.Entry{rep("a", 2), rep("b", 2), rep("c", 2)}, due: map[string]int{"b": 2},
			want: []Fill{fill("a", 2), refill("b", 2), fill("c", 2)}},
	} {
		t.Run(name, func(t *testing.T) {
			got := Fills(tc.now, margin, tc.current, tc.entries, tc.scheduled, tc.due)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fills (-want +got):\n%s", diff)
			}
		})
	}
}
