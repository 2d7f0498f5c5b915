package order

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// TestFenceWaitsForEarlierFencesOnly: a writer waits for the fences up
// when it writes, not for its own or later ones, and no fence holds
// longer than FenceMax.
func TestFenceWaitsForEarlierFencesOnly(t *testing.T) {
	var fs Fences
	a := fs.Raise()
	b := fs.Raise()
	fs.Wait(a) // nothing ahead of a: returns at once
	done := make(chan struct{})
	go func() { fs.Wait(b); close(done) }()
	select {
	case <-done:
		t.Fatal("a writer behind b did not wait for a")
	case <-time.After(5 * time.Millisecond):
	}
	fs.Release(a)
	<-done
	fs.Release(a) // twice: nothing
	if !fs.Held() {
		t.Fatal("b is still up")
	}
	start := time.Now()
	fs.Wait(nil) // b times out
	if d := time.Since(start); d > 10*FenceMax {
		t.Fatalf("waited %v for a fence bounded by %v", d, FenceMax)
	}
	if fs.Held() || !fs.IsReleased(b) {
		t.Fatalf("held %v, b released %v; want false, true", fs.Held(), fs.IsReleased(b))
	}
}

// TestUnsentFenceOutlastsFenceMax: a fence whose command a session writes
// later is not down after FenceMax while the command is unwritten (a
// goroutine the machine does not run for a while must not let later
// commands go first); once sent, FenceMax bounds it again.
func TestUnsentFenceOutlastsFenceMax(t *testing.T) {
	var fs Fences
	f := fs.RaiseUnsent()
	select {
	case <-f.done:
		t.Fatal("an unsent fence was down before its command was written")
	case <-time.After(2 * FenceMax):
	}
	fs.Sent(f)
	start := time.Now()
	fs.Wait(nil) // f times out, FenceMax after sent
	if d := time.Since(start); d > 10*FenceMax {
		t.Fatalf("waited %v after sent for a fence bounded by %v", d, FenceMax)
	}
	if fs.Held() {
		t.Fatal("f is still up")
	}
	fs.Sent(f) // released already: nothing
}

// TestFenceBoundCounted: a fence that comes down by its bound is counted
// (ordering_bounds_reached_total); one Redis answered is not.
func TestFenceBoundCounted(t *testing.T) {
	var n atomic.Int32
	fs := Fences{Bound: func() { n.Add(1) }}
	fs.Release(fs.Raise())
	fs.Wait(nil)
	if n.Load() != 0 {
		t.Fatalf("a fence released by its answer counted %d times", n.Load())
	}
	f := fs.Raise()
	<-f.done // down within FenceMax, by the timer, which then counts it
	eventually.True(t, 5*time.Second, "the bound counted", func() bool { return n.Load() == 1 })
	fs.Release(f) // released already: not counted again
	if got := n.Load(); got != 1 {
		t.Fatalf("a fence down by its bound counted %d times, want 1", got)
	}
}
