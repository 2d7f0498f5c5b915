package sketch

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestAveragesRiseOnlyWhenUpdated drives a sketch with random batches, pins
// and clock steps, and after each step checks every key's window averages
// against the previous check: a key that TakeUpdated did not list (and said
// its list was complete) has an average no higher than before, or, if a
// slot left the window in between, at most Slots/(Slots−1) times higher.
// The node agent relies on this to look only at the keys it counted when
// deciding whether a summary is urgent.
func TestAveragesRiseOnlyWhenUpdated(t *testing.T) {
	const slots = 4
	boundaryRises := 0 // rises of keys not counted since: only across a slot boundary
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		s := mustNew(t, Config{K: 16, Window: 2 * time.Second, Slots: slots, Lead: 100 * time.Millisecond, MinSpan: 100 * time.Millisecond})
		now := t0
		s.Advance(now)
		prev, prevSlot := map[string]Item{}, s.cur
		checks, unlisted := 0, 0
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
			listed := map[string]bool{}
			complete := s.TakeUpdated(func(it Item) { listed[it.Key] = true })
			if !complete {
				t.Fatalf("seed %d step %d: list incomplete with %d keys stored", seed, step, s.Len())
			}
			checks++
			boundary := s.cur != prevSlot
			cur := map[string]Item{}
			for _, it := range s.AppendItems(nil) {
				cur[it.Key] = it
				p, ok := prev[it.Key]
				if listed[it.Key] || !ok {
					continue // counted since, or new (only counts admit a key)
				}
				unlisted++
				limit := 1.0
				if boundary {
					limit = float64(slots) / (slots - 1)
				}
				for _, c := range [][2]float64{{p.ReadAvg, it.ReadAvg}, {p.WriteAvg, it.WriteAvg}} {
					if c[1] > c[0]*limit*(1+1e-9) {
						t.Fatalf("seed %d step %d: %q not counted since the last check, yet its average went %g -> %g (boundary %v)", seed, step, it.Key, c[0], c[1], boundary)
					}
					if c[1] > c[0]*(1+1e-9) {
						boundaryRises++
					}
				}
			}
			prev, prevSlot = cur, s.cur
		}
		if checks == 0 || unlisted == 0 {
			t.Fatalf("seed %d: %d checks, %d unlisted keys compared: the test exercised nothing", seed, checks, unlisted)
		}
	}
	if boundaryRises == 0 {
		t.Fatal("no average rose across a slot boundary without counts: the test did not exercise the bound")
	}
}

// TestTakeUpdatedForgets checks that a key is listed once per update
// window: a second call without updates in between lists nothing.
func TestTakeUpdatedForgets(t *testing.T) {
	s := mustNew(t, Config{K: 8, Window: 10 * time.Second, Slots: 10})
	s.Advance(t0)
	s.Update("a", 5, 0, 0)
	s.Update("b", 0, 2, 0)
	s.Update("a", 1, 0, 0)
	var first []string
	if !s.TakeUpdated(func(it Item) { first = append(first, it.Key) }) {
		t.Fatal("first call: incomplete")
	}
	if len(first) != 2 {
		t.Fatalf("first call listed %v, want a and b once each", first)
	}
	s.Advance(t0.Add(1500 * time.Millisecond)) // across a slot boundary
	n := 0
	if !s.TakeUpdated(func(Item) { n++ }) || n != 0 {
		t.Fatalf("second call without updates listed %d keys", n)
	}
}
