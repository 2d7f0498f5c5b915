package engine

import (
	"testing"
	"time"
)

func TestLagOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	hist := []offsetSample{{at: at(0), offset: 100}, {at: at(1), offset: 200}, {at: at(2), offset: 200}, {at: at(3), offset: 350}}
	for name, tc := range map[string]struct {
		hist    []offsetSample
		replica int64
		now     time.Time
		want    time.Duration
		wantOK  bool
	}{
		"no sample: unknown":                        {replica: 5, now: at(3)},
		"caught up with the newest sample":          {hist: hist, replica: 350, now: at(3.001), wantOK: true},
		"ahead of the sample (read after it)":       {hist: hist, replica: 400, now: at(3.001), wantOK: true},
		"behind the newest only: since that sample": {hist: hist, replica: 200, now: at(3.5), want: 500 * time.Millisecond, wantOK: true},
		"behind since the second sample":            {hist: hist, replica: 150, now: at(3.5), want: 2500 * time.Millisecond, wantOK: true},
		// Behind every sample, a replica lacks writes older than the
		// history: how much older cannot be told, so it is not measured
		// (not read), rather than given the history's age as its lag.
		"behind every sample: unknown":                 {hist: hist, replica: 50, now: at(3.5)},
		"behind the one sample after a start: unknown": {hist: hist[3:], replica: 50, now: at(3.001)},
		"at the oldest sample: since the next one":     {hist: hist, replica: 100, now: at(3.5), want: 2500 * time.Millisecond, wantOK: true},
		"an idle master: equal offsets mean no lag":    {hist: []offsetSample{{at: at(0), offset: 7}, {at: at(1), offset: 7}}, replica: 7, now: at(9), wantOK: true},
		"a clock that went back never gives negative":  {hist: hist, replica: 200, now: at(2), want: 0, wantOK: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := lagOf(tc.hist, tc.replica, tc.now)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("lagOf = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestOffsetHistory(t *testing.T) {
	const historyLen = 64
	h := offsetHistory{max: historyLen}
	t0 := time.Unix(0, 0)
	for i := 0; i < historyLen+10; i++ {
		h.add(offsetSample{at: t0.Add(time.Duration(i) * time.Second), offset: int64(i * 10)})
	}
	if len(h.samples) != historyLen || h.samples[0].offset != 100 || h.samples[historyLen-1].offset != int64((historyLen+9)*10) {
		t.Fatalf("history kept %d samples from %d to %d", len(h.samples), h.samples[0].offset, h.samples[len(h.samples)-1].offset)
	}
	// A new master starts from a lower offset: the old history is dropped.
	h.add(offsetSample{at: t0, offset: 3})
	if len(h.samples) != 1 || h.samples[0].offset != 3 {
		t.Fatalf("after an offset going back: %v", h.samples)
	}
}

func TestHistoryFor(t *testing.T) {
	ms := time.Millisecond
	for name, tc := range map[string]struct {
		maxLag, check time.Duration
		want          int
	}{
		"the defaults (1 s, 1 s)":                {maxLag: time.Second, check: time.Second, want: 3},
		"maxLag under the interval":              {maxLag: 100 * ms, check: time.Second, want: 3},
		"maxLag of 100 intervals":                {maxLag: 100 * time.Second, check: time.Second, want: 102},
		"a part interval rounds up":              {maxLag: 1500 * ms, check: time.Second, want: 4},
		"maxLag over 1,024 intervals: the bound": {maxLag: time.Hour, check: 100 * ms, want: maxHistory},
	} {
		t.Run(name, func(t *testing.T) {
			if got := historyFor(tc.maxLag, tc.check); got != tc.want {
				t.Errorf("historyFor(%v, %v) = %d, want %d", tc.maxLag, tc.check, got, tc.want)
			}
		})
	}
	// A replica 100 intervals behind, with a maxLag of 101 intervals, is
	// measured within its bound once the history has filled; the fixed 64
	// samples it once had never reached back that far.
	check, maxLag := time.Second, 101*time.Second
	h := offsetHistory{max: historyFor(maxLag, check)}
	t0 := time.Unix(1000, 0)
	for i := range 200 {
		at := t0.Add(time.Duration(i) * check)
		h.add(offsetSample{at: at, offset: int64(i * 10), sent: at.Add(-ms)})
	}
	now := t0.Add(199*check + ms)
	replica := int64(99 * 10) // holds what the master had 100 checks ago
	lag, ok := lagOf(h.samples, replica, now)
	cu, cuOK := caughtUpTo(h.samples, replica)
	if !ok || !cuOK || !usableReplica(lag, maxLag, check, cu, now, time.Time{}) {
		t.Fatalf("a replica 100 checks behind, maxLag 101 checks: lag %v (%v), caught up to %v (%v); want it usable", lag, ok, now.Sub(cu), cuOK)
	}
}

func TestPickReplica(t *testing.T) {
	for name, tc := range map[string]struct {
		usable []bool
		start  uint64
		want   int
	}{
		"none":                   {want: -1},
		"start mod usable":       {usable: []bool{true, true, true}, start: 4, want: 1},
		"skips an unusable one":  {usable: []bool{true, false, true}, start: 1, want: 2},
		"wraps over the usable":  {usable: []bool{true, false, true}, start: 2, want: 0},
		"every replica unusable": {usable: []bool{false, false}, start: 0, want: -1},
		"a lone usable replica":  {usable: []bool{false, true}, start: 9, want: 1},
	} {
		t.Run(name, func(t *testing.T) {
			if got := pickReplica(tc.usable, tc.start); got != tc.want {
				t.Errorf("pickReplica = %d, want %d", got, tc.want)
			}
		})
	}
	// Successive reads spread evenly over the usable replicas, a skipped
	// one's share too.
	for name, tc := range map[string]struct {
		usable []bool
		want   []int
	}{
		"two usable":          {usable: []bool{true, true}, want: []int{500, 500}},
		"three, one unusable": {usable: []bool{true, false, true}, want: []int{500, 0, 500}},
	} {
		t.Run(name, func(t *testing.T) {
			got := make([]int, len(tc.usable))
			for i := uint64(0); i < 1000; i++ {
				got[pickReplica(tc.usable, i)]++
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("reads per replica = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestUsableReplica(t *testing.T) {
	const bound, check = 100 * time.Millisecond, time.Second
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	for name, tc := range map[string]struct {
		lag                  time.Duration
		caughtUp, now, wrote time.Time
		want                 bool
	}{
		"within the bound, no write":                 {lag: 0, caughtUp: t0, now: t0, want: true},
		"at the bound":                               {lag: bound, caughtUp: t0, now: t0, want: true},
		"over the bound":                             {lag: bound + 1, caughtUp: t0, now: t0},
		"down or not measured":                       {lag: lagUnknown, caughtUp: t0, now: t0},
		"measured, but behind every sample":          {lag: 0, now: t0},
		"held up to the bound plus a check ago":      {lag: 0, caughtUp: t0, now: t0.Add(bound + check), want: true},
		"held only longer ago: a check late or slow": {lag: 0, caughtUp: t0, now: t0.Add(bound + check + ms)},
		"written here, replica known to hold it":     {caughtUp: t0.Add(ms), now: t0.Add(ms), wrote: t0, want: true},
		"written here, replica not known to hold it": {caughtUp: t0.Add(-ms), now: t0, wrote: t0},
		"written here, replica behind every sample":  {now: t0, wrote: t0},
	} {
		t.Run(name, func(t *testing.T) {
			if got := usableReplica(tc.lag, bound, check, tc.caughtUp, tc.now, tc.wrote); got != tc.want {
				t.Errorf("usableReplica = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCaughtUpTo(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	hist := []offsetSample{{t0, 100, t0.Add(-ms)}, {t0.Add(time.Second), 200, t0.Add(time.Second - ms)}, {t0.Add(2 * time.Second), 300, t0.Add(2*time.Second - ms)}}
	for name, tc := range map[string]struct {
		replica int64
		want    time.Time
		wantOK  bool
	}{
		"past every sample: when the newest was asked": {replica: 350, want: t0.Add(2*time.Second - ms), wantOK: true},
		"at a sample":         {replica: 200, want: t0.Add(time.Second - ms), wantOK: true},
		"between two samples": {replica: 250, want: t0.Add(time.Second - ms), wantOK: true},
		"behind every sample": {replica: 50},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := caughtUpTo(hist, tc.replica)
			if !got.Equal(tc.want) || ok != tc.wantOK {
				t.Errorf("caughtUpTo = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseRole(t *testing.T) {
	for name, tc := range map[string]struct {
		v       []any
		want    role
		wantErr bool
	}{
		"master":               {v: []any{"master", int64(77), []any{[]any{"127.0.0.1", "7001", "77"}}}, want: role{master: true, offset: 77, connected: true}},
		"connected replica":    {v: []any{"slave", "127.0.0.1", int64(7000), "connected", int64(70)}, want: role{offset: 70, connected: true}},
		"syncing replica":      {v: []any{"slave", "127.0.0.1", int64(7000), "sync", int64(-1)}, want: role{offset: -1}},
		"sentinel":             {v: []any{"sentinel", []any{"mymaster"}}, wantErr: true},
		"empty":                {wantErr: true},
		"short replica":        {v: []any{"slave", "127.0.0.1"}, wantErr: true},
		"offset not a integer": {v: []any{"master", "77"}, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseRole(tc.v)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseRole = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
