package sketch

// The admission filter: HeavyKeeper buckets that estimate the count of a
// key outside the store, and their lazy fade at slot boundaries.

import (
	"math"
	"math/bits"
)

// filter runs HeavyKeeper for a key outside the store and returns its
// estimated weighted count.
func (s *Sketch) filter(h uint64, w uint64) uint64 {
	fp := uint32(h>>32) | 1
	var est uint64
	width := int(s.width)
	hh := h
	for r := 0; r < s.rows; r++ {
		// Lemire's fastrange: a 32-bit hash part times width, high half.
		i := r*width + int((hh&0xffffffff)*s.width>>32)
		if p := uint(i) / pageSize; s.pageFades[p] != s.fades {
			s.catchUp(p) // the fades due on its page (see fade)
		}
		b := &s.hk[i]
		hh = bits.RotateLeft64(hh, -21)
		switch {
		case b.fp == fp:
			b.count = uint32(min(uint64(b.count)+w, math.MaxUint32))
		case b.count == 0:
			b.fp, b.count = fp, uint32(min(w, math.MaxUint32))
		default:
			// Decay with probability b^-count; a weighted observation decays
			// by its weight at once (the batched form of w single decays).
			if b.count < uint32(len(decayTable)) && s.rand() < decayTable[b.count] {
				if uint64(b.count) > w {
					b.count -= uint32(w)
					continue
				}
				b.fp, b.count = fp, uint32(min(w-uint64(b.count), math.MaxUint32))
				if b.count == 0 {
					b.count = 1
				}
			} else {
				continue
			}
		}
		est = max(est, uint64(b.count))
	}
	return est
}

func (s *Sketch) rand() uint64 {
	// xorshift64*: fast, and quality is ample for decay coin flips.
	s.rng ^= s.rng >> 12
	s.rng ^= s.rng << 25
	s.rng ^= s.rng >> 27
	return s.rng * 2685821657736338717
}

// fade scales the filter's counts by FadePercent at each slot boundary. The
// filter only decides admission; the store keeps the window. A short memory
// (half per slot) lets a key that turns hot take over a bucket held by a
// formerly heavy key within a slot: with the window's (S-1)/S the incumbents
// of a 10-slot window were nearly permanent and a new key at 1% of the
// traffic missed the top-K in 1 of 30 seeded runs, 0 of 30 with one half.
//
// The fade is due at each slot boundary but done when a page of the filter
// is next used (catchUp, from filter): each bucket gets the same fades in the same order
// either way, so the filter decides exactly as with a pass over all of it
// at every boundary (TestLazyFadeIsExact). That pass over a 20,000-bucket
// filter per policy per second was 29 % of the fleet simulator's CPU at
// 1,000 agents × 10 policies, most of them idle; now a slot costs a page
// per bucket used.
func (s *Sketch) fade() {
	if s.decayN < 1024 { // FadePercent 100 keeps every count
		s.fades++
	}
}

// pageSize is how many buckets fade together.
const pageSize = 64

// catchUp applies to page p the fades due since it last had them.
func (s *Sketch) catchUp(p uint) {
	k := s.fades - s.pageFades[p]
	s.pageFades[p] = s.fades
	page := s.hk[p*pageSize : min((p+1)*pageSize, uint(len(s.hk)))]
	if s.decayN == 512 {
		// FadePercent 50, the default: a fade is c*512>>10 = c>>1 exactly,
		// so k of them are one shift (0 from k = 32 on) instead of up to 32
		// multiplications per bucket. A quiet node's sketch meets a stale
		// page at most updates (catchUp was 3–11 % of the fleet
		// simulator's CPU at 1,000–2,500 nodes); BenchmarkSparseUpdates
		// went from 1.35–1.63 to 1.01–1.38 µs per slot of four updates.
		for j := range page {
			page[j].count >>= k
		}
		return
	}
	for j := range page {
		c := uint64(page[j].count)
		for n := uint32(0); n < k && c != 0; n++ { // c strictly falls: decayN < 1024
			c = c * uint64(s.decayN) >> 10
		}
		page[j].count = uint32(c)
	}
}
