package decide

import (
	"testing"
	"time"
)

// TestDecideOnCountsNotBounds: an upper bound over a threshold starts and
// keeps the sustainFor timer but never makes a key hot; only a count over the
// threshold does, once the timer has run, and a count at or under the
// threshold ends the timer. Cooling is as for counts.
func TestDecideOnCountsNotBounds(t *testing.T) {
	obs := func(reads, writes int64, bound bool) map[string]Observation {
		return map[string]Observation{"k": {Families: strFams, ReadsPerSecond: reads, WritesPerSecond: writes, Bound: bound}}
	}
	var (
		boundHot    = obs(6000, 0, true)    // over 5000 on the bound only
		countHot    = obs(6000, 0, false)   // over 5000, counted
		countAt     = obs(5000, 0, false)   // at the threshold: not over
		countWarm   = obs(4500, 0, false)   // under 5000, over 4000
		boundWarm   = obs(4500, 0, true)    // the same on a bound
		boundCold   = obs(3000, 0, true)    // under 4000 on a bound: the count is too
		boundWrites = obs(0, 1100, true)    // a counter over 1000 writes/s on the bound
		countWrites = obs(0, 1100, false)   // the same, counted
		boundBoth   = obs(6000, 1100, true) // both directions, bound
	)
	const none = -1
	tests := map[string]struct {
		ticks       []tick
		wantHot     bool
		wantPending time.Duration // the pending timer's start from t0; none for no timer
		wantStarted int
		wantEnded   int
		wantNext    time.Duration // from t0; none for no timer
		wantDetect  time.Duration // DetectedAt from t0, when hot
	}{
		"a bound held past sustainFor is not hot": {
			ticks:   []tick{{0, boundHot}, {2 * time.Second, boundHot}, {time.Minute, boundHot}},
			wantHot: false, wantPending: 0, wantNext: none,
		},
		"a bound alone starts the timer": {
			ticks:   []tick{{0, boundHot}, {time.Second, boundHot}},
			wantHot: false, wantPending: 0, wantNext: 2 * time.Second,
		},
		"the count after sustainFor makes it hot at once, detected when the bound went over": {
			ticks:   []tick{{0, boundHot}, {2 * time.Second, boundHot}, {2500 * time.Millisecond, countHot}},
			wantHot: true, wantPending: none, wantStarted: 1, wantNext: none, wantDetect: 0,
		},
		"a count within sustainFor keeps the bound's timer": {
			ticks:   []tick{{0, boundHot}, {time.Second, countHot}, {2 * time.Second, countHot}},
			wantHot: true, wantPending: none, wantStarted: 1, wantNext: none, wantDetect: 0,
		},
		"a count under the threshold ends the bound's timer": {
			ticks:   []tick{{0, boundHot}, {time.Second, countWarm}, {3 * time.Second, boundHot}},
			wantHot: false, wantPending: 3 * time.Second, wantNext: 5 * time.Second,
		},
		"a count at the threshold ends it too": {
			ticks:   []tick{{0, boundHot}, {time.Second, countAt}, {2 * time.Second, countAt}},
			wantHot: false, wantPending: none, wantNext: none,
		},
		"a count over, then only a bound at sustainFor: waits for the count": {
			ticks:   []tick{{0, countHot}, {2 * time.Second, boundHot}},
			wantHot: false, wantPending: 0, wantNext: none,
		},
		"... and the count decides": {
			ticks:   []tick{{0, countHot}, {2 * time.Second, boundHot}, {2200 * time.Millisecond, countHot}},
			wantHot: true, wantPending: none, wantStarted: 1, wantNext: none, wantDetect: 0,
		},
		"counts alone are as before": {
			ticks:   []tick{{0, countHot}, {2 * time.Second, countHot}},
			wantHot: true, wantPending: none, wantStarted: 1, wantNext: none, wantDetect: 0,
		},
		"writes: a counter on the bound is not hot": {
			ticks:   []tick{{0, boundWrites}, {2 * time.Second, boundWrites}, {10 * time.Second, boundWrites}},
			wantHot: false, wantPending: 0, wantNext: none,
		},
		"writes: counted, it is": {
			ticks: []tick{{0, boundWrites}, {2 * time.Second, countWrites}},
			// Next: the split's first generation starts at the next epoch.
			wantHot: true, wantPending: none, wantStarted: 1, wantNext: time.Minute, wantDetect: 0,
		},
		"both directions on the bound: neither is hot": {
			ticks:   []tick{{0, boundBoth}, {5 * time.Second, boundBoth}},
			wantHot: false, wantPending: 0, wantNext: none,
		},
		"a hot key stays hot on a bound in the band": {
			ticks:   []tick{{0, countHot}, {2 * time.Second, countHot}, {3 * time.Second, boundWarm}, {time.Hour, boundWarm}},
			wantHot: true, wantPending: none, wantStarted: 1, wantNext: none, wantDetect: 0,
		},
		"a hot key cools on a bound under the band": {
			ticks:   []tick{{0, countHot}, {2 * time.Second, countHot}, {3 * time.Second, boundCold}, {3*time.Second + 5*time.Minute, boundCold}},
			wantHot: false, wantPending: none, wantStarted: 1, wantEnded: 1, wantNext: none,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec := testSpec()
			var st State
			var out Output
			started, ended := 0, 0
			for _, tk := range tc.ticks {
				out = Decide(Input{Now: t0.Add(tk.at), Spec: spec, Observations: tk.obs, State: st, Margin: 10 * time.Second})
				st = out.State
				started += out.Started
				ended += out.Ended
			}
			var k *KeyState
			for i := range st.Keys {
				if st.Keys[i].Key == "k" {
					k = &st.Keys[i]
				}
			}
			if got := k != nil && k.hot(); got != tc.wantHot {
				t.Errorf("hot = %v, want %v (state %+v)", got, tc.wantHot, st)
			}
			if got := len(out.Entries) == 1; got != tc.wantHot {
				t.Errorf("entries %+v, want hot %v", out.Entries, tc.wantHot)
			}
			var pending *time.Time
			if k != nil {
				pending = earliestPtr(k.ReadOverSince, k.WriteOverSince)
			}
			switch {
			case tc.wantPending == none && pending != nil:
				t.Errorf("pending since %v, want no timer", pending.Sub(t0))
			case tc.wantPending != none && (pending == nil || !pending.Equal(t0.Add(tc.wantPending))):
				t.Errorf("pending %v, want since %v", pending, tc.wantPending)
			}
			if started != tc.wantStarted || ended != tc.wantEnded {
				t.Errorf("started/ended = %d/%d, want %d/%d", started, ended, tc.wantStarted, tc.wantEnded)
			}
			var want time.Time
			if tc.wantNext != none {
				want = t0.Add(tc.wantNext)
			}
			if !out.NextCheck.Equal(want) {
				t.Errorf("next = %v, want %v", out.NextCheck, want)
			}
			if tc.wantHot && k != nil && (k.DetectedAt == nil || !k.DetectedAt.Equal(t0.Add(tc.wantDetect))) {
				t.Errorf("detected at %v, want %v", k.DetectedAt, t0.Add(tc.wantDetect))
			}
		})
	}
}

// TestStepOnBounds is step's rule alone, per direction: the bound may start
// the timer, never end it by making the key hot.
func TestStepOnBounds(t *testing.T) {
	spec := testSpec()
	const th = 5000
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	tests := map[string]struct {
		hot         bool
		overSince   *time.Time
		rate        int64
		bound, room bool
		now         time.Duration
		wantHot     bool
		wantOver    *time.Time
		wantDue     time.Time
	}{
		"bound over, no timer: starts it":      {rate: 6000, bound: true, room: true, now: 0, wantOver: at(0), wantDue: t0.Add(2 * time.Second)},
		"bound over, timer run: waits":         {overSince: at(0), rate: 6000, bound: true, room: true, now: 3 * time.Second, wantOver: at(0)},
		"count over, timer run: hot":           {overSince: at(0), rate: 6000, room: true, now: 3 * time.Second, wantHot: true},
		"count over, timer run, no room":       {overSince: at(0), rate: 6000, now: 3 * time.Second, wantOver: at(0)},
		"count under: timer ends":              {overSince: at(0), rate: 4999, room: true, now: 3 * time.Second},
		"bound under: timer ends (true under)": {overSince: at(0), rate: 4999, bound: true, room: true, now: 3 * time.Second},
		"count exactly at: not over":           {overSince: at(0), rate: th, room: true, now: 3 * time.Second},
		"hot, bound in the band: stays":        {hot: true, rate: 4500, bound: true, room: true, now: time.Hour, wantHot: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			hot, over := tc.hot, tc.overSince
			var under *time.Time
			due := step(t0.Add(tc.now), &hot, &over, &under, tc.rate, th, tc.bound, 0, spec, tc.room)
			if hot != tc.wantHot {
				t.Errorf("hot = %v, want %v", hot, tc.wantHot)
			}
			if (over == nil) != (tc.wantOver == nil) || (over != nil && !over.Equal(*tc.wantOver)) {
				t.Errorf("overSince = %v, want %v", over, tc.wantOver)
			}
			if !due.Equal(tc.wantDue) {
				t.Errorf("due = %v, want %v", due, tc.wantDue)
			}
		})
	}
}
