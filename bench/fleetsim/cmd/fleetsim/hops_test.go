package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestStateTimes(t *testing.T) {
	raw := `{"keys":[{"key":"viral","readHot":true,"since":"2026-12-04T10:00:02.5Z","detectedAt":"2026-12-04T10:00:01.25Z"},{"key":"held","heldUntil":"2026-12-04T10:00:09Z"}]}`
	got := stateTimes(raw)
	want := map[string]keyTimes{"viral": {
		DetectedAt: time.Date(2026, 12, 4, 10, 0, 1, 250e6, time.UTC),
		Since:      time.Date(2026, 12, 4, 10, 0, 2, 500e6, time.UTC)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("stateTimes (-want +got):\n%s", diff)
	}
	if stateTimes("") != nil || stateTimes("{") != nil {
		t.Fatal("no state or an unreadable one must give nil")
	}
}

func TestHopsOf(t *testing.T) {
	hot := time.Unix(1000, 0)
	at := func(ms int) time.Time { return hot.Add(time.Duration(ms) * time.Millisecond) }
	versions := []seenVersion{
		{Version: 1, At: at(100), Keys: nil},
		{Version: 2, At: at(1600), Keys: []string{"viral"}, Hot: map[string]keyTimes{"viral": {DetectedAt: at(300), Since: at(1400)}}},
	}
	agents := []sidecarEvent{{sidecar: 0, version: 2, at: at(1700)}, {sidecar: 1, version: 3, at: at(1800)}, {sidecar: 1, version: 1, at: at(200)}}
	sidecars := []sidecarEvent{
		{sidecar: 0, version: 2, at: at(1750)}, {sidecar: 1, version: 2, at: at(1800)},
		{sidecar: 2, version: 2, at: at(1900)}, {sidecar: 3, version: 2, at: at(2000)},
	}
	got := hopsOf(versions, "viral", hot, 500*time.Millisecond, time.Second, agents, sidecars, 2)
	want := &Hops{Detected: 0.3, Decided: 1.1, Published: 0.2, AgentsP50: 0.1, AgentsP99: 0.2,
		SidecarsP50: 0.1, SidecarsP99: 0.2, BeyondP50: 0.8, BeyondP99: 1.0,
		Crossing: 0.5, CrossedP50: 0.3, CrossedP99: 0.5}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Fatalf("hopsOf (-want +got):\n%s", diff)
	}
	if hopsOf(versions, "counter", hot, 0, time.Second, agents, sidecars, 2) != nil {
		t.Fatal("a key no version holds has no hops")
	}
}

// TestCrossing: a key offered at rate r from the hot event's start has had
// its threshold's worth of operations in the last second threshold ÷ r
// later; under its threshold, never.
func TestCrossing(t *testing.T) {
	for _, c := range []struct {
		rate      float64
		threshold int64
		want      time.Duration
		ok        bool
	}{{5500, 5000, 909090909, true}, {10000, 5000, 500 * time.Millisecond, true}, {4750, 5000, 0, false}, {5000, 5000, 0, false}, {100, 0, 0, false}} {
		got, ok := crossing(c.rate, c.threshold)
		if ok != c.ok || (got-c.want).Abs() > time.Microsecond {
			t.Errorf("crossing(%v, %d) = %v, %v; want %v, %v", c.rate, c.threshold, got, ok, c.want, c.ok)
		}
	}
}
