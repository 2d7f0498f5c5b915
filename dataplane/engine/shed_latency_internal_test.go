package engine

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// TestShedStep: the rule a limiter follows after each window of its
// replies' waits (the sidecar's and the hook's alike): most over shedSlow
// halves the fraction (down to shedMinFactor); a quiet window (most under
// shedQuick, none over shedSlow, or too few to tell) counts, and
// shedQuietWindows of them in a row double it (up to 1); anything between
// holds it and ends the quiet run.
func TestShedStep(t *testing.T) {
	for _, c := range []struct {
		name           string
		f              float64
		quiet          int
		n, slow, quick int
		want           float64
		wantQuiet      int
	}{
		{"most slow: halve", 1, 0, 10, 6, 0, 0.5, 0},
		{"all slow: halve, the quiet run ends", 0.25, 1, 40, 40, 0, 0.125, 0},
		{"most slow at the floor: stays", shedMinFactor, 0, 10, 10, 0, shedMinFactor, 0},
		{"most slow near the floor: the floor", 1.5 * shedMinFactor, 0, 10, 10, 0, shedMinFactor, 0},
		{"half slow: no cut, not quiet", 0.5, 1, 10, 5, 0, 0.5, 0},
		{"waits around the high mark: hold", 0.25, 0, 12, 6, 2, 0.25, 0},
		{"mostly between the marks: hold, the quiet run ends", 0.5, 1, 10, 1, 3, 0.5, 0},
		{"most quick, first in a row: counts", 0.25, 0, 10, 4, 6, 0.25, 1},
		{"most quick, second in a row: doubles", 0.25, 1, 10, 4, 6, 0.5, 0},
		{"none slow (a farther shard at rest): counts", 0.5, 0, 10, 0, 0, 0.5, 1},
		{"none slow, second in a row: doubles", 0.5, 1, 10, 0, 0, 1, 0},
		{"quiet at the top: stays whole", 1, 1, 10, 0, 10, 1, 0},
		{"too few to tell: counts as quiet", shedMinFactor, 0, 3, 3, 0, shedMinFactor, 1},
		{"too few, second in a row: doubles", shedMinFactor, 1, 3, 3, 0, 2 * shedMinFactor, 0},
		{"none at all (a window left after a pause): quiet", 0.5, 1, 0, 0, 0, 1, 0},
	} {
		f, q := shedStep(c.f, c.quiet, waitWindow{n: c.n, slow: c.slow, quick: c.quick})
		if f != c.want || q != c.wantQuiet {
			t.Errorf("%s: shedStep(%v, %d, n=%d slow=%d quick=%d) = %v, %d; want %v, %d", c.name, c.f, c.quiet, c.n, c.slow, c.quick, f, q, c.want, c.wantQuiet)
		}
	}
}

// TestShedFollowsTheShardsWait: a bucket's windows of replies, on an
// injected clock: its admitted commands mostly waiting over shedSlow halve
// what it admits of its share every window, down to shedMinFactor; waits
// that sit around the high mark then hold it there; once they are quick
// every second window doubles it back to the whole share.
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
	// window sends each wait of ws at now, then one more shedLatencyWindow
	// later, which closes the window.
	window := func(ws ...time.Duration) {
		for _, w := range ws[:len(ws)-1] {
			b.waited(now, w)
		}
		now = now.Add(shedLatencyWindow)
		b.waited(now, ws[len(ws)-1])
	}
	slow, mid, quick := 2*shedSlow, (shedSlow+shedQuick)/2, shedQuick/3
	window(slow, slow, slow, slow, slow, quick, quick, quick, quick, quick) // half slow: no cut
	if b.cut != 0 {
		t.Fatalf("a window with half its replies slow cut %.3f", b.cut)
	}
	for i, want := range []float64{0.5, 0.25, 0.125, 1.0 / 16, 1.0 / 32, 1.0 / 64, 1.0 / 64} {
		window(slow, slow, slow, slow, slow, slow, quick, quick, quick, quick)
		if got := 1 - b.cut; got != want {
			t.Fatalf("after %d slow windows the fraction is %v, want %v", i+1, got, want)
		}
	}
	// Waits spread over both marks, as behind 20 ms scripts: half of
	// them over the high mark, a few under the low one: the fraction holds.
	for i := range 20 {
		window(slow, slow, slow, slow, slow, mid, mid, mid, quick, quick)
		if got := 1 - b.cut; got != 1.0/64 {
			t.Fatalf("after %d windows around the high mark the fraction is %v, want it held at 1/64", i+1, got)
		}
	}
	if got := admitted(time.Second); got > 0.05 {
		t.Errorf("a queueing shard: %.3f of the share admitted, want at most 1/64 and the burst", got)
	}
	// The first reply after that second closes the window it opened (too
	// few to tell: quiet), then every second quick window doubles.
	b.waited(now, quick)
	for i, want := range []float64{1.0 / 64, 1.0 / 32, 1.0 / 32, 1.0 / 16, 1.0 / 16, 1.0 / 8, 1.0 / 8, 0.25, 0.25, 0.5, 0.5, 1, 1} {
		if i > 0 {
			window(quick, quick, quick, quick, quick, quick, quick, quick, quick, mid)
		}
		if got := 1 - b.cut; got != want {
			t.Fatalf("after %d quiet windows the fraction is %v, want %v", i+1, got, want)
		}
	}
	admitted(time.Second) // its own demand measured again, after the pause the windows took
	if got := admitted(time.Second); got < 0.95 {
		t.Errorf("the shard fast again: %.3f of the share admitted, want all of it", got)
	}
}
