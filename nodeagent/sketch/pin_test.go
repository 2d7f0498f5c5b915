package sketch

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A pinned key is counted exactly and never evicted, however many heavier
// keys arrive, and is listed even while it has no traffic.
func TestPinnedKeyCountedExactlyUnderFlood(t *testing.T) {
	s := mustNew(t, Config{K: 16, MemoryBytes: 16 << 10})
	t0 := time.Unix(1000, 0)
	s.Advance(t0)
	if !s.Pin("viral") {
		t.Fatal("Pin refused with an empty store")
	}
	if top := s.Top(100); len(top) != 1 || top[0].Key != "viral" || !top[0].Pinned || top[0].Reads != 0 {
		t.Fatalf("pinned key with no traffic: Top = %+v", top)
	}
	const rounds = 50
	for r := range rounds {
		s.Advance(t0.Add(time.Duration(r) * 100 * time.Millisecond))
		s.Update("viral", 1, 0, 0) // far lighter than the flood
		for i := range 200 {
			s.Update(fmt.Sprintf("flood-%d-%d", r, i), 50, 0, 0)
		}
	}
	var got *Item
	for _, it := range s.Top(1000) {
		if it.Key == "viral" {
			got = &it
		}
	}
	if got == nil || !got.Pinned || got.Reads != rounds {
		t.Fatalf("pinned key = %+v, want %d reads, pinned", got, rounds)
	}
	if s.Len() > s.Capacity() {
		t.Fatalf("store holds %d keys, capacity %d", s.Len(), s.Capacity())
	}
}

func TestUnpinReturnsKeyToTheRanking(t *testing.T) {
	s := mustNew(t, Config{K: 16, MemoryBytes: 16 << 10})
	s.Advance(time.Unix(1000, 0))
	s.Pin("idle")
	s.Pin("busy")
	s.Update("busy", 10, 0, 0)
	s.Unpin("idle") // no traffic: dropped at once
	s.Unpin("busy") // traffic: ranked with the others
	if p := s.Pinned(); len(p) != 0 {
		t.Fatalf("Pinned() = %v after Unpin", p)
	}
	top := s.Top(10)
	if len(top) != 1 || top[0].Key != "busy" || top[0].Pinned || top[0].Reads != 10 {
		t.Fatalf("Top = %+v, want busy alone, unpinned, 10 reads", top)
	}
}

func TestPinLimit(t *testing.T) {
	s := mustNew(t, Config{K: 16, MemoryBytes: 16 << 10})
	s.Advance(time.Unix(1000, 0))
	n := 0
	for i := range s.Capacity() {
		if s.Pin(fmt.Sprint("k", i)) {
			n++
		}
	}
	if n != s.MaxPinned() || len(s.Pinned()) != n {
		t.Fatalf("pinned %d (list %d), want MaxPinned %d", n, len(s.Pinned()), s.MaxPinned())
	}
	if !s.Pin("k0") {
		t.Fatal("re-pinning a pinned key failed")
	}
}

// Tracking is zero while every key is stored, and once the store is full it
// is the weakest stored key's weighted rate, as reads and as writes.
func TestTracking(t *testing.T) {
	s := mustNew(t, Config{K: 4, MemoryBytes: 8 << 10, ReadWeight: 1, WriteWeight: 4, Window: time.Second, Slots: 10})
	t0 := time.Unix(1000, 0)
	s.Advance(t0)
	s.Update("a", 10, 0, 0)
	if r, w := s.Tracking(); r != 0 || w != 0 {
		t.Fatalf("Tracking with room = %v, %v, want 0, 0", r, w)
	}
	for i := range s.Capacity() + 50 {
		s.Update(fmt.Sprint("k", i), uint32(1+i%7), 0, 0)
	}
	r, w := s.Tracking()
	top := s.Top(s.Capacity())
	weakest := top[len(top)-1]
	if r <= 0 || w != r/4 {
		t.Fatalf("Tracking = %v, %v; want reads > 0 and writes = reads/4", r, w)
	}
	if weakest.ReadRate != r {
		t.Fatalf("Tracking reads %v, want the weakest stored key's rate %v", r, weakest.ReadRate)
	}
	if slices.ContainsFunc(top, func(it Item) bool { return it.ReadRate < r }) {
		t.Fatal("a stored key is below the tracking level")
	}
}

// Pinning a key admitted within the window restarts its count (its
// admission was triggered by an arrival, which biases a short average
// upward); a key tracked for longer than the window keeps its counts.
func TestPinRestartsARecentAdmission(t *testing.T) {
	s := mustNew(t, Config{K: 16, MemoryBytes: 16 << 10, Window: time.Second, Slots: 10})
	t0 := time.Unix(1000, 0)
	s.Advance(t0)
	s.Update("old", 5, 0, 0)
	for i := 1; i <= 20; i++ { // 2 s: "old" has been stored longer than the window
		s.Advance(t0.Add(time.Duration(i) * 100 * time.Millisecond))
		s.Update("old", 5, 0, 0)
	}
	s.Update("new", 7, 0, 0) // admitted now
	s.Pin("old")
	s.Pin("new")
	got := map[string]uint64{}
	for _, it := range s.Top(10) {
		got[it.Key] = it.Reads
	}
	if got["old"] != 50 || got["new"] != 0 {
		t.Fatalf("reads after pinning = %v, want old 50 (its window) and new 0 (restarted)", got)
	}
}
