package engine

import (
	"testing"
	"time"
)

func TestLagOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	hist := []offsetSample{{at(0), 100}, {at(1), 200}, {at(2), 200}, {at(3), 350}}
	for name, tc := range map[string]struct {
		hist    []offsetSample
		replica int64
		now     time.Time
		want    time.Duration
		wantOK  bool
	}{
		"no sample: unknown":                          {replica: 5, now: at(3)},
		"caught up with the newest sample":            {hist: hist, replica: 350, now: at(3.001), wantOK: true},
		"ahead of the sample (read after it)":         {hist: hist, replica: 400, now: at(3.001), wantOK: true},
		"behind the newest only: since that sample":   {hist: hist, replica: 200, now: at(3.5), want: 500 * time.Millisecond, wantOK: true},
		"behind since the second sample":              {hist: hist, replica: 150, now: at(3.5), want: 2500 * time.Millisecond, wantOK: true},
		"behind every sample: at least the history":   {hist: hist, replica: 50, now: at(3.5), want: 3500 * time.Millisecond, wantOK: true},
		"an idle master: equal offsets mean no lag":   {hist: []offsetSample{{at(0), 7}, {at(1), 7}}, replica: 7, now: at(9), wantOK: true},
		"a clock that went back never gives negative": {hist: hist, replica: 200, now: at(2), want: 0, wantOK: true},
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
	var h offsetHistory
	t0 := time.Unix(0, 0)
	for i := 0; i < historyLen+10; i++ {
		h.add(offsetSample{t0.Add(time.Duration(i) * time.Second), int64(i * 10)})
	}
	if len(h.samples) != historyLen || h.samples[0].offset != 100 || h.samples[historyLen-1].offset != int64((historyLen+9)*10) {
		t.Fatalf("history kept %d samples from %d to %d", len(h.samples), h.samples[0].offset, h.samples[len(h.samples)-1].offset)
	}
	// A new master starts from a lower offset: the old history is dropped.
	h.add(offsetSample{t0, 3})
	if len(h.samples) != 1 || h.samples[0].offset != 3 {
		t.Fatalf("after an offset going back: %v", h.samples)
	}
}

func TestPickReplica(t *testing.T) {
	const bound = 100 * time.Millisecond
	for name, tc := range map[string]struct {
		lags  []time.Duration
		start uint64
		want  int
	}{
		"none":                         {want: -1},
		"start mod usable":             {lags: []time.Duration{0, 0, 0}, start: 4, want: 1},
		"skips a lagging replica":      {lags: []time.Duration{0, 2 * bound, 0}, start: 1, want: 2},
		"wraps over the usable":        {lags: []time.Duration{0, 2 * bound, 0}, start: 2, want: 0},
		"skips an unknown replica":     {lags: []time.Duration{lagUnknown, 0}, start: 0, want: 1},
		"at the bound is usable":       {lags: []time.Duration{bound}, start: 9, want: 0},
		"every replica over the bound": {lags: []time.Duration{bound + 1, lagUnknown}, start: 0, want: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if got := pickReplica(tc.lags, bound, tc.start); got != tc.want {
				t.Errorf("pickReplica = %d, want %d", got, tc.want)
			}
		})
	}
	// Successive reads spread evenly over the usable replicas, a skipped
	// one's share too.
	for name, tc := range map[string]struct {
		lags []time.Duration
		want []int
	}{
		"two usable":         {lags: []time.Duration{0, 0}, want: []int{500, 500}},
		"three, one lagging": {lags: []time.Duration{0, time.Hour, 0}, want: []int{500, 0, 500}},
	} {
		t.Run(name, func(t *testing.T) {
			got := make([]int, len(tc.lags))
			for i := uint64(0); i < 1000; i++ {
				got[pickReplica(tc.lags, bound, i)]++
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("reads per replica = %v, want %v", got, tc.want)
				}
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
