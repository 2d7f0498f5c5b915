package proxy

import (
	"testing"
	"time"
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
