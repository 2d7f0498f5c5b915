package engine

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// TestShedFollowsTheShardsWait: a limiter whose admitted commands mostly
// wait over shedSlow halves what it admits of its share every window, down
// to shedMinFactor, and doubles it back once they do not; a window with a
// minority of slow replies does not cut.
func TestShedFollowsTheShardsWait(t *testing.T) {
	const share = 1000.0 // budget = demand = own: the share is the whole budget
	s := &routing.Shed{WritesPerSecond: 1000, DemandWrites: 1000, MinPerSecond: 10}
	t0 := time.Unix(1_800_000_000, 0)
	var b bucket
	// Measure the own demand first (1,000/s over a window of 1 s).
	now := t0
	for range 1000 {
		b.admit(now, s, routing.ShedWrites)
		now = now.Add(time.Millisecond)
	}
	admitted := func(d time.Duration) float64 {
		// Attempts at 1,000/s for d; the fraction admitted, in units of the
		// share (the bucket starts from whatever it holds: about 0.1 s).
		n := 0
		for end := now.Add(d); now.Before(end); now = now.Add(time.Millisecond) {
			if b.admit(now, s, routing.ShedWrites) {
				n++
			}
		}
		return float64(n) / (share * d.Seconds())
	}
	if got := admitted(time.Second); got < 0.95 {
		t.Fatalf("a fast shard: %.3f of the share admitted, want all of it", got)
	}
	window := func(slow, fast int) {
		for range slow {
			b.waited(now, 2*shedSlow)
		}
		for range fast {
			b.waited(now, time.Millisecond)
		}
		now = now.Add(shedLatencyWindow)
		b.waited(now, time.Millisecond) // closes the window
	}
	window(10, 10) // half slow (with the closing reply, a minority): no cut
	if b.cut != 0 {
		t.Fatalf("a window with a minority of slow replies cut %.3f", b.cut)
	}
	for i, want := range []float64{0.5, 0.25, 0.125, 1.0 / 16, 1.0 / 32, 1.0 / 64, 1.0 / 64} {
		window(10, 0)
		if got := 1 - b.cut; got != want {
			t.Fatalf("after %d slow windows the fraction is %v, want %v", i+1, got, want)
		}
	}
	if got := admitted(time.Second); got > 0.05 {
		t.Errorf("a queueing shard: %.3f of the share admitted, want at most 1/64 and the burst", got)
	}
	// The first reply after that second closes the window it opened (a
	// fast one: the fraction doubles), then each window doubles it again.
	b.waited(now, time.Millisecond)
	for i, want := range []float64{1.0 / 32, 1.0 / 16, 1.0 / 8, 0.25, 0.5, 1, 1} {
		if i > 0 {
			window(0, 10)
		}
		if got := 1 - b.cut; got != want {
			t.Fatalf("after %d fast windows the fraction is %v, want %v", i+1, got, want)
		}
	}
	admitted(time.Second) // its own demand measured again, after the pause the windows took
	if got := admitted(time.Second); got < 0.95 {
		t.Errorf("the shard fast again: %.3f of the share admitted, want all of it", got)
	}
}
