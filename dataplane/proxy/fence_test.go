package proxy

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// TestFenceWaitsForEarlierFencesOnly: a writer waits for the fences up
// when it writes, not for its own or later ones, and no fence holds
// longer than fenceMax.
func TestFenceWaitsForEarlierFencesOnly(t *testing.T) {
	var fs fences
	a := fs.raise()
	b := fs.raise()
	fs.wait(a) // nothing ahead of a: returns at once
	done := make(chan struct{})
	go func() { fs.wait(b); close(done) }()
	select {
	case <-done:
		t.Fatal("a writer behind b did not wait for a")
	case <-time.After(5 * time.Millisecond):
	}
	fs.release(a)
	<-done
	fs.release(a) // twice: nothing
	if !fs.held() {
		t.Fatal("b is still up")
	}
	start := time.Now()
	fs.wait(nil) // b times out
	if d := time.Since(start); d > 10*fenceMax {
		t.Fatalf("waited %v for a fence bounded by %v", d, fenceMax)
	}
	if fs.held() || !fs.isReleased(b) {
		t.Fatalf("held %v, b released %v; want false, true", fs.held(), fs.isReleased(b))
	}
}

// TestUnsentFenceOutlastsFenceMax: a fence whose command a session writes
// later is not down after fenceMax while the command is unwritten (a
// goroutine the machine does not run for a while must not let later
// commands go first); once sent, fenceMax bounds it again.
func TestUnsentFenceOutlastsFenceMax(t *testing.T) {
	var fs fences
	f := fs.raiseUnsent()
	select {
	case <-f.done:
		t.Fatal("an unsent fence was down before its command was written")
	case <-time.After(2 * fenceMax):
	}
	fs.sent(f)
	start := time.Now()
	fs.wait(nil) // f times out, fenceMax after sent
	if d := time.Since(start); d > 10*fenceMax {
		t.Fatalf("waited %v after sent for a fence bounded by %v", d, fenceMax)
	}
	if fs.held() {
		t.Fatal("f is still up")
	}
	fs.sent(f) // released already: nothing
}

// TestFenceBoundCounted: a fence that comes down by its bound is counted
// (ordering_bounds_reached_total); one Redis answered is not.
func TestFenceBoundCounted(t *testing.T) {
	var n atomic.Int32
	fs := fences{bound: func() { n.Add(1) }}
	fs.release(fs.raise())
	fs.wait(nil)
	if n.Load() != 0 {
		t.Fatalf("a fence released by its answer counted %d times", n.Load())
	}
	f := fs.raise()
	<-f.done // down within fenceMax, by the timer, which then counts it
	eventually.True(t, 5*time.Second, "the bound counted", func() bool { return n.Load() == 1 })
	fs.release(f) // released already: not counted again
	if got := n.Load(); got != 1 {
		t.Fatalf("a fence down by its bound counted %d times, want 1", got)
	}
}
