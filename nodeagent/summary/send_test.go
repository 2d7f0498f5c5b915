package summary

import (
	"slices"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
)

// TestSenderRule walks one policy's send rule through a pin's life: a new
// pin makes the next summary urgent once, not before a batch has counted
// it since the pin, its follow-up goes
// PinFollowUpAfter the interval after the summary that echoed it and once
// only, the same pins again are not new, a pinned key never makes a
// summary urgent while an unpinned one newly alerting does, and the pins a
// directive drops are unpinned.
func TestSenderRule(t *testing.T) {
	sk, err := sketch.New(sketch.Config{K: 16})
	if err != nil {
		t.Fatal(err)
	}
	const interval = time.Second
	alert := agentlink.Rates{Reads: 10}
	t0 := time.Unix(1_000_000, 0)
	var s Sender
	step := func(at time.Duration, items []sketch.Item, wantUrgent bool) {
		t.Helper()
		c := s.Check(t0.Add(at), items, alert, true)
		if c.Urgent != wantUrgent {
			t.Fatalf("at %v: urgent = %v, want %v", at, c.Urgent, wantUrgent)
		}
		keys, _ := Build(items, agentlink.Rates{Reads: 1, Writes: 1}, agentlink.Rates{}, 100)
		s.Sent(c, keys, interval)
	}
	step(0, nil, false)
	if refused := s.Pins(sk, []string{"a"}, 2, t0); refused != 0 {
		t.Fatalf("refused %d pins", refused)
	}
	if s.Check(t0.Add(50*time.Millisecond), nil, alert, false).Urgent || s.MayBeUrgent(t0, nil, alert, false) {
		t.Fatalf("a new pin no batch has counted since: urgent")
	}
	if !s.MayBeUrgent(t0, nil, alert, true) {
		t.Fatalf("a new pin: MayBeUrgent says no")
	}
	step(100*time.Millisecond, nil, true)  // echoes the pin
	step(200*time.Millisecond, nil, false) // once
	s.Pins(sk, []string{"a"}, 3, t0.Add(250*time.Millisecond))
	step(300*time.Millisecond, nil, false) // the same pin is not new
	due := 100*time.Millisecond + PinFollowUpAfter(interval)
	if s.FollowUpDue(t0.Add(due-time.Millisecond)) || !s.FollowUpDue(t0.Add(due)) {
		t.Fatalf("follow-up not due at exactly %v", due)
	}
	step(due, nil, true)
	step(due+100*time.Millisecond, nil, false) // once

	hot := []sketch.Item{{Key: "a", Pinned: true, Reads: 40, ReadAvg: 40, ReadRate: 40}}
	step(2*time.Second, hot, false) // a pinned key's counts never do
	hot = append(hot, sketch.Item{Key: "c", Reads: 40, ReadAvg: 40, ReadRate: 40})
	if !s.MayBeUrgent(t0.Add(2100*time.Millisecond), hot, alert, true) {
		t.Fatalf("a key newly alerting: MayBeUrgent says no")
	}
	step(2100*time.Millisecond, hot, true)
	step(2200*time.Millisecond, hot, false) // sent over: not again

	s.Pins(sk, []string{"b"}, 4, t0.Add(2300*time.Millisecond))
	if got := sk.Pinned(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("pinned %v after a directive pinning b only", got)
	}
}

// TestSenderEchoesOnlyCountedPins: every summary, urgent or due by the
// interval, echoes the directive before a new pin until the pin's counts
// are in, then the new one; one that went before them leaves the pin's
// urgent echo to come, and so does a directive pinning another key
// between Check and Sent. A summary due by the interval that echoed a new
// pin before its counts told a manager the key's exact rate was zero, and
// the previous release's manager unpinned it (test/skew
// TestSkewPreviousManager).
func TestSenderEchoesOnlyCountedPins(t *testing.T) {
	sk, err := sketch.New(sketch.Config{K: 16})
	if err != nil {
		t.Fatal(err)
	}
	const interval = time.Second
	t0 := time.Unix(1_000_000, 0)
	var s Sender
	s.Pins(sk, nil, 1, t0)
	if c := s.Check(t0, nil, agentlink.Rates{}, true); c.Echo != 1 || c.Urgent {
		t.Fatalf("no pins: echo %d (urgent %v), want 1, not urgent", c.Echo, c.Urgent)
	}
	s.Pins(sk, []string{"a"}, 2, t0)
	s.Pins(sk, []string{"a"}, 3, t0.Add(10*time.Millisecond)) // a floor change, say
	c := s.Check(t0.Add(50*time.Millisecond), nil, agentlink.Rates{}, false)
	if c.Echo != 1 || c.Urgent {
		t.Fatalf("pin not counted: echo %d (urgent %v), want 1, not urgent", c.Echo, c.Urgent)
	}
	s.Sent(c, nil, interval) // due by the interval
	c = s.Check(t0.Add(100*time.Millisecond), nil, agentlink.Rates{}, true)
	if c.Echo != 3 || !c.Urgent {
		t.Fatalf("pin counted: echo %d (urgent %v), want 3, urgent", c.Echo, c.Urgent)
	}
	s.Pins(sk, []string{"a", "b"}, 4, t0.Add(110*time.Millisecond)) // between Check and Sent
	s.Sent(c, nil, interval)
	c = s.Check(t0.Add(150*time.Millisecond), nil, agentlink.Rates{}, false)
	if c.Echo != 3 || c.Urgent {
		t.Fatalf("b not counted: echo %d (urgent %v), want 3, not urgent", c.Echo, c.Urgent)
	}
	if c = s.Check(t0.Add(200*time.Millisecond), nil, agentlink.Rates{}, true); c.Echo != 4 || !c.Urgent {
		t.Fatalf("b counted: echo %d (urgent %v), want 4, urgent", c.Echo, c.Urgent)
	}
	s.Sent(c, nil, interval)
	if c = s.Check(t0.Add(300*time.Millisecond), nil, agentlink.Rates{}, true); c.Echo != 4 || c.Urgent {
		t.Fatalf("echoed: echo %d (urgent %v), want 4, not urgent", c.Echo, c.Urgent)
	}
}

// TestSchedule: the agent's summary is due at the interval, or urgent at
// least minGap after the last one; at once at first and after Reset.
func TestSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const interval, gap = time.Second, 100 * time.Millisecond
	var s Schedule
	if !s.Due(t0, interval, gap, false) || s.Early(t0, interval) {
		t.Fatalf("first summary not due at once")
	}
	s.Sent(t0)
	for _, tc := range []struct {
		at         time.Duration
		urgent     bool
		due, early bool
	}{
		{50 * time.Millisecond, true, false, true},
		{gap, false, false, true},
		{gap, true, true, true},
		{interval, false, true, false},
	} {
		now := t0.Add(tc.at)
		if due, early := s.Due(now, interval, gap, tc.urgent), s.Early(now, interval); due != tc.due || early != tc.early {
			t.Errorf("at %v, urgent %v: due %v, early %v; want %v, %v", tc.at, tc.urgent, due, early, tc.due, tc.early)
		}
	}
	s.Reset()
	if !s.Due(t0.Add(gap/2), interval, gap, false) {
		t.Errorf("not due at once after Reset")
	}
}
