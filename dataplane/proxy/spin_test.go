package proxy

import (
	"testing"
	"time"
)

func TestSpinnerBudgetBounded(t *testing.T) {
	var s spinner
	if b := s.budget(); b != spinFloor {
		t.Fatalf("first budget %v, want the floor %v", b, spinFloor)
	}
	for range 100 {
		s.done(true, 3*spinMax)
	}
	if b := s.budget(); b != spinMax {
		t.Fatalf("budget after long paying spins %v, want the cap %v", b, spinMax)
	}
	s = spinner{}
	for range 100 {
		s.done(true, 15*time.Microsecond)
	}
	if b := s.budget(); b < 28*time.Microsecond || b > 30*time.Microsecond {
		t.Fatalf("budget after 15 µs spins %v, want about twice that", b)
	}
}

func TestSpinnerBacksOff(t *testing.T) {
	var s spinner
	skipped := func() int {
		n := 0
		for s.budget() == 0 {
			n++
		}
		return n
	}
	s.done(false, spinFloor)
	if n := skipped(); n != 2 {
		t.Fatalf("after one miss %d waits parked at once, want 2", n)
	}
	s.done(false, spinFloor)
	if n := skipped(); n != 4 {
		t.Fatalf("after two misses %d waits parked at once, want 4", n)
	}
	for range 40 {
		s.done(false, spinFloor)
	}
	if n := skipped(); n != spinMaxSkip {
		t.Fatalf("after many misses %d waits parked at once, want the bound %d", n, spinMaxSkip)
	}
	s.done(true, spinFloor)
	s.done(false, spinFloor)
	if n := skipped(); n != 2 {
		t.Fatalf("a paying spin did not reset the back-off: %d skipped", n)
	}
}

func TestActivityCountsDistinctClientsPerWindow(t *testing.T) {
	var a activity
	now := time.Unix(0, 0)
	a.tick(now)
	seen := make([]uint32, 5)
	for range 10 {
		a.touch(&seen[0]) // one client, many commands
	}
	if !a.few() {
		t.Fatal("one active client: spinning is off")
	}
	for i := range seen {
		a.touch(&seen[i])
	}
	if a.few() {
		t.Fatal("five active clients in the window: spinning is on")
	}
	now = now.Add(activityWindow)
	a.tick(now)
	if a.few() {
		t.Fatal("the last window's five clients no longer count")
	}
	a.touch(&seen[0])
	now = now.Add(activityWindow)
	a.tick(now)
	if !a.few() {
		t.Fatal("one client in each of the last two windows: spinning is off")
	}
}
