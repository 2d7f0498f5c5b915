package sketch

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestLazyFadeIsExact plays one stream into two sketches with the same
// seed: one fades its filter lazily (as it does), the other has every page
// brought up to date after each Advance (a fade of the whole filter at each
// slot boundary, as before). Their filters, stores and rankings must be the
// same throughout, with idle gaps longer than the window in between.
func TestLazyFadeIsExact(t *testing.T) {
	for seed := range uint64(5) {
		cfg := Config{K: 50, MemoryBytes: 32 << 10, Window: 2 * time.Second, Slots: 4, WriteWeight: 3}
		lazy, eager := mustNew(t, cfg), mustNew(t, cfg)
		eager.seed = lazy.seed
		rng := rand.New(rand.NewPCG(seed, 2))
		now := t0
		materialize := func(s *Sketch) {
			for p := range s.pageFades {
				if s.pageFades[p] != s.fades {
					s.catchUp(uint(p))
				}
			}
		}
		for step := range 3000 {
			switch {
			case step%700 == 699:
				now = now.Add(5 * time.Second) // idle for longer than the window
			default:
				now = now.Add(time.Duration(rng.IntN(30)) * time.Millisecond)
			}
			lazy.Advance(now)
			eager.Advance(now)
			materialize(eager)
			for range rng.IntN(20) {
				key := "k" + strconv.Itoa(int(rng.ExpFloat64()*200))
				r, w := uint32(rng.IntN(3)), uint32(rng.IntN(2))
				lazy.Update(key, r, w, 10)
				eager.Update(key, r, w, 10)
			}
			if step%100 == 0 {
				a, b := lazy.Top(50), eager.Top(50)
				if !slices.Equal(a, b) {
					t.Fatalf("seed %d step %d: rankings differ:\nlazy  %v\neager %v", seed, step, a, b)
				}
			}
		}
		materialize(lazy)
		if !slices.Equal(lazy.hk, eager.hk) {
			t.Fatalf("seed %d: filters differ after bringing every page up to date", seed)
		}
		if lazy.fades == 0 {
			t.Fatal("no fade happened: the test exercised nothing")
		}
	}
}
