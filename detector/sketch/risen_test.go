package sketch

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestTakeRisenMissesNoRise drives a sketch with random batches, pins and
// clock steps, and after each step checks TakeRisen against a full look at
// every item: any key whose window average or one-slot rate rose since the
// previous check must be among the items TakeRisen gave, unless it said its
// list was incomplete. The node agent relies on this to skip building a
// summary at ticks where no key can have newly reached its alert level.
func TestTakeRisenMissesNoRise(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		s := mustNew(t, Config{K: 16, Window: 2 * time.Second, Slots: 4, Lead: 100 * time.Millisecond, MinSpan: 100 * time.Millisecond})
		now := t0
		s.Advance(now)
		prev := map[string]Item{}
		checks, incomplete, rises := 0, 0, 0
		for step := range 400 {
			// Between 0 and 120 ms: several steps within a slot, and now
			// and then a slot boundary.
			now = now.Add(time.Duration(rng.IntN(120)) * time.Millisecond)
			s.Advance(now)
			for range rng.IntN(4) {
				key := "k" + string(rune('a'+rng.IntN(40)))
				s.Update(key, uint32(rng.IntN(3)), uint32(rng.IntN(2)), 10)
			}
			if step%50 == 7 {
				s.Pin("k" + string(rune('a'+rng.IntN(40))))
			}
			if rng.IntN(3) > 0 {
				continue // several steps between checks
			}
			got := map[string]bool{}
			complete := s.TakeRisen(func(it Item) { got[it.Key] = true })
			checks++
			if !complete {
				incomplete++
			}
			cur := map[string]Item{}
			for _, it := range s.Items() {
				cur[it.Key] = it
				p, ok := prev[it.Key]
				rose := !ok || it.ReadAvg > p.ReadAvg || it.WriteAvg > p.WriteAvg ||
					it.ReadRecent > p.ReadRecent || it.WriteRecent > p.WriteRecent
				if !rose || (!ok && it.Pinned && it.Reads+it.Writes == 0) {
					continue // a pin with no counts has rates of 0
				}
				rises++
				if complete && !got[it.Key] {
					t.Fatalf("seed %d step %d: %q rose (%+v -> %+v) but TakeRisen did not list it and said its list was complete", seed, step, it.Key, p, it)
				}
			}
			prev = cur
		}
		if incomplete == checks || rises == 0 {
			t.Fatalf("seed %d: %d checks, %d incomplete, %d rises: the test did not exercise complete lists", seed, checks, incomplete, rises)
		}
	}
}

// TestTakeRisenForgets checks that a key is listed once per rise: a second
// call without updates in between lists nothing, and reports a complete
// list while no slot boundary passed.
func TestTakeRisenForgets(t *testing.T) {
	s := mustNew(t, Config{K: 8, Window: 10 * time.Second, Slots: 10})
	s.Advance(t0)
	s.Update("a", 5, 0, 0)
	s.Update("b", 0, 2, 0)
	s.Update("a", 1, 0, 0)
	var first []string
	if !s.TakeRisen(func(it Item) { first = append(first, it.Key) }) {
		t.Fatal("first call: incomplete within one slot")
	}
	if len(first) != 2 {
		t.Fatalf("first call listed %v, want a and b once each", first)
	}
	s.Advance(t0.Add(300 * time.Millisecond))
	n := 0
	if !s.TakeRisen(func(Item) { n++ }) || n != 0 {
		t.Fatalf("second call without updates listed %d keys (complete must be true within the slot)", n)
	}
	s.Advance(t0.Add(1500 * time.Millisecond))
	if s.TakeRisen(func(Item) {}) {
		t.Fatal("after a slot boundary TakeRisen said its list was complete")
	}
}
