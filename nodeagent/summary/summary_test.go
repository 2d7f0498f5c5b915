package summary

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
)

func TestBuild(t *testing.T) {
	items := []sketch.Item{
		{Key: "hot", ReadRate: 100, ReadAvg: 90, ReadRecent: 100, ByteRate: 800},
		{Key: "writes", WriteRate: 3, WriteAvg: 3},
		{Key: "cold", ReadRate: 0.5, ReadAvg: 0.5},
		{Key: "pinned-idle", Pinned: true},
		{Key: "warm", ReadRate: 20, ReadAvg: 20},
	}
	for name, tc := range map[string]struct {
		floor, tracking agentlink.Rates
		max             int
		wantKeys        []string
		wantUnseen      agentlink.Rates
	}{
		"floor lists keys at or over it, pinned always": {
			floor: agentlink.Rates{Reads: 1, Writes: 1}, max: 100,
			wantKeys: []string{"pinned-idle", "hot", "warm", "writes"}, wantUnseen: agentlink.Rates{Reads: 1, Writes: 1},
		},
		"tracking above the floor raises the bound": {
			floor: agentlink.Rates{Reads: 1, Writes: 1}, tracking: agentlink.Rates{Reads: 4, Writes: 2}, max: 100,
			wantKeys: []string{"pinned-idle", "hot", "warm", "writes"}, wantUnseen: agentlink.Rates{Reads: 4, Writes: 2},
		},
		"cut keys raise the bound to their rates": {
			floor: agentlink.Rates{Reads: 1, Writes: 1}, max: 2,
			wantKeys: []string{"pinned-idle", "hot"}, wantUnseen: agentlink.Rates{Reads: 20, Writes: 3},
		},
		"pinned keys survive any cut": {
			floor: agentlink.Rates{Reads: 1, Writes: 1}, max: 0,
			wantKeys: []string{"pinned-idle"}, wantUnseen: agentlink.Rates{Reads: 100, Writes: 3},
		},
	} {
		t.Run(name, func(t *testing.T) {
			keys, unseen := Build(items, tc.floor, tc.tracking, tc.max)
			var got []string
			for _, k := range keys {
				got = append(got, k.Key)
			}
			if d := cmp.Diff(tc.wantKeys, got); d != "" {
				t.Errorf("keys (-want +got):\n%s", d)
			}
			if unseen != tc.wantUnseen {
				t.Errorf("unseen = %+v, want %+v", unseen, tc.wantUnseen)
			}
		})
	}
	keys, _ := Build(items, agentlink.Rates{Reads: 1, Writes: 1}, agentlink.Rates{}, 10)
	if k := keys[1]; k.Key != "hot" || k.Reads != 90 || k.RecentReads != 100 || k.Bytes != 800 || k.Pinned {
		t.Errorf("hot listed as %+v", k)
	}
	if !keys[0].Pinned {
		t.Errorf("pinned key listed as %+v", keys[0])
	}
}

func TestUrgent(t *testing.T) {
	alert := agentlink.Rates{Reads: 10, Writes: 2}
	k := func(key string, r, w float64) agentlink.KeyRates {
		return agentlink.KeyRates{Key: key, Reads: r, Writes: w}
	}
	// it is a key rated r reads/s and w writes/s on n counts.
	it := func(key string, r, w float64, n uint64) sketch.Item {
		return sketch.Item{Key: key, ReadAvg: r, WriteAvg: w, ReadRate: r, WriteRate: w, Reads: n}
	}
	for name, tc := range map[string]struct {
		last []agentlink.KeyRates
		now  []sketch.Item
		want bool
	}{
		"nothing over alert":             {now: []sketch.Item{it("a", 9, 1, 90)}},
		"a key crosses":                  {last: []agentlink.KeyRates{k("a", 9, 0)}, now: []sketch.Item{it("a", 11, 0, 110)}, want: true},
		"a new key over alert":           {now: []sketch.Item{it("b", 0, 2, 4)}, want: true},
		"a new key on two counts":        {now: []sketch.Item{it("b", 20, 0, 2)}, want: true},
		"one count is not evidence":      {now: []sketch.Item{it("b", 10, 0, 1)}},
		"still over: not again":          {last: []agentlink.KeyRates{k("a", 12, 0)}, now: []sketch.Item{it("a", 30, 0, 300)}},
		"falls below: not urgent":        {last: []agentlink.KeyRates{k("a", 12, 0)}, now: []sketch.Item{it("a", 3, 0, 30)}},
		"writes cross, reads stay":       {last: []agentlink.KeyRates{k("a", 12, 0)}, now: []sketch.Item{it("a", 12, 5, 170)}},
		"recent rate alone is not alert": {now: []sketch.Item{{Key: "a", ReadAvg: 5, ReadRate: 50, ReadRecent: 50, Reads: 50}}},
		"no alert level: never":          {now: []sketch.Item{it("a", 1e9, 1e9, 1e9)}},
		// Its pin made one summary urgent; its counts never do (Alerting).
		"a pinned key crosses: not urgent": {last: []agentlink.KeyRates{k("a", 9, 0)},
			now: []sketch.Item{{Key: "a", ReadAvg: 11, ReadRate: 11, Reads: 110, Pinned: true}}},
	} {
		t.Run(name, func(t *testing.T) {
			a := alert
			if name == "no alert level: never" {
				a = agentlink.Rates{}
			}
			var last Sent
			last.Set(tc.last)
			if got := Urgent(&last, tc.now, a); got != tc.want {
				t.Fatalf("Urgent = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for name, tc := range map[string]struct {
		last   time.Time
		age    time.Duration
		urgent bool
		want   bool
	}{
		"first":                 {want: true},
		"interval passed":       {last: t0, age: time.Second, want: true},
		"not yet":               {last: t0, age: 500 * time.Millisecond},
		"urgent after min gap":  {last: t0, age: 100 * time.Millisecond, urgent: true, want: true},
		"urgent within min gap": {last: t0, age: 50 * time.Millisecond, urgent: true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Due(t0.Add(tc.age), tc.last, time.Second, 100*time.Millisecond, tc.urgent); got != tc.want {
				t.Fatalf("Due = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSentFollowsTheAlertLevel: what was over the alert level in the last
// summary is worked out again when the level changes.
func TestSentFollowsTheAlertLevel(t *testing.T) {
	var s Sent
	s.Set([]agentlink.KeyRates{{Key: "a", Reads: 12}})
	hot := []sketch.Item{{Key: "a", ReadAvg: 30, ReadRate: 30, Reads: 300}}
	if Urgent(&s, hot, agentlink.Rates{Reads: 10}) {
		t.Fatal("a was over 10/s in the last summary: not urgent")
	}
	if !Urgent(&s, hot, agentlink.Rates{Reads: 20}) {
		t.Fatal("a was under 20/s in the last summary and is over it now: urgent")
	}
	s.Set([]agentlink.KeyRates{{Key: "a", Reads: 25}})
	if Urgent(&s, hot, agentlink.Rates{Reads: 20}) {
		t.Fatal("after a summary listing a at 25/s: not urgent at 20/s")
	}
}
