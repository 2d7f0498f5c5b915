package sketch

// Reading the sketch: items, the top keys, the updated keys and the bound
// on every key outside the store.

import (
	"slices"
	"strings"

	"github.com/heatsink-dev/heatsink/routing"
)

// Tracking returns the rates below which a key the store does not hold
// lies, read and write apart: zero while the store has room (every key that
// came is stored), otherwise the weighted rate of the store's weakest key
// turned into a read rate and a write rate. A key outside the store would
// have displaced that key had its estimate been higher, so this bounds it as
// closely as the filter's admission rule does (HeavyKeeper underestimates,
// never overestimates, so the bound holds in practice, not by proof).
func (s *Sketch) Tracking() (reads, writes float64) {
	if len(s.heap)+len(s.pinned) < s.m || len(s.heap) == 0 {
		return 0, 0
	}
	it := s.item(s.heap[0])
	w := it.ReadRate*float64(s.cfg.ReadWeight) + it.WriteRate*float64(s.cfg.WriteWeight)
	return w / float64(s.cfg.ReadWeight), w / float64(s.cfg.WriteWeight)
}

// TakeUpdated calls f (if not nil) with the item of every stored key
// updated since the previous call, forgets them, and reports whether that
// list is complete (false when more than Capacity keys were, or may have
// been). Call Advance first, as for Top.
//
// With it a caller can follow keys whose rates rise without rating the
// whole store: a key's window average and one-slot rate fall as time
// passes without counts (see item), and rise only when it is updated, or
// when a slot leaves the window: then the average of a key stored for about
// the window can rise, by at most Slots/(Slots−1), as its span shrinks by
// a slot (TestAveragesRiseOnlyWhenUpdated).
func (s *Sketch) TakeUpdated(f func(Item)) (complete bool) {
	for _, x := range s.updated {
		if e := &s.ents[x]; e.updated {
			e.updated = false
			if f != nil {
				f(s.item(x))
			}
		}
	}
	s.updated = s.updated[:0]
	complete = !s.overflow
	s.overflow = false
	return complete
}

// AppendItems appends every stored key's item to dst, in no particular
// order, and returns the extended slice: Top without the ranking, for
// callers that filter and order by other means and reuse one buffer from
// summary to summary (an agent builds one per policy every report interval).
func (s *Sketch) AppendItems(dst []Item) []Item {
	dst = slices.Grow(dst, s.Len())
	for _, set := range [2][]int32{s.heap, s.pinned} {
		for _, x := range set {
			dst = append(dst, s.item(x))
		}
	}
	return dst
}

// Item is one key's window counts and rates.
type Item struct {
	Key string
	// Score is the ranking: weighted reads and writes in the window,
	// including the filter's estimate at admission.
	Score uint64
	// Reads, Writes and Bytes are exact counts since the key entered the
	// store, within the window.
	Reads, Writes, Bytes uint64
	// ReadRate, WriteRate and ByteRate are per second; see Top.
	ReadRate, WriteRate, ByteRate float64
	// ReadAvg, WriteAvg and ByteAvg are the window averages alone, and
	// ReadRecent and WriteRecent the one-slot rates alone (see Top). Each is
	// an unbiased estimate; their maximum (ReadRate...) is not: for a key
	// with few counts per slot the one-slot rate is noisy, and the larger of
	// two noisy values overestimates. A sum over many nodes must therefore
	// add each apart and take the larger of the sums (agentlink.KeyRates).
	ReadAvg, WriteAvg, ByteAvg float64
	ReadRecent, WriteRecent    float64
	// Pinned is set for keys held by Pin: their counts are exact since the
	// key was stored (pinned, or earlier).
	Pinned bool
	// Families are the command families counted for the key in the last
	// one to two windows (UpdateFamilies).
	Families routing.Families
}

// Top returns up to n items, highest score first. Rates are the larger of
// the window average (over the time the key has been tracked, plus Lead, at
// least MinSpan) and the rate over the last slot's length (the current partial slot
// plus the overlapping share of the previous one):
// the first makes a key that turns hot show its rate after one slot, the
// second lets a long-tracked key that turns hot be seen without waiting for
// its window average to catch up. Falling rates thus fade with the window,
// which suits hysteresis.
func (s *Sketch) Top(n int) []Item {
	order := slices.Concat(s.heap, s.pinned)
	slices.SortFunc(order, func(a, b int32) int {
		ea, eb := &s.ents[a], &s.ents[b]
		switch {
		case ea.score > eb.score:
			return -1
		case ea.score < eb.score:
			return 1
		}
		return strings.Compare(ea.key, eb.key)
	})
	if len(order) > n {
		order = order[:n]
	}
	out := make([]Item, len(order))
	for i, x := range order {
		out[i] = s.item(x)
	}
	return out
}

// dataEnd is where the traffic counted so far ends, the same moment for
// every key: the last batch counted (each batch carries the traffic up to
// its arrival), or Lead ago once none came for that long (nothing is in
// flight then, and the spans run on with the clock, so a key that stops
// fades). It must not depend on the key's own arrivals: ending a key's span
// at its own last batch when that is recent (and Lead ago otherwise)
// lengthens the span exactly when it holds one more count, and the
// manager's sum over thousands of nodes keeps such a bias whole (the
// one-slot sum read −5.5 % to +2.4 % that way in
// TestRatesUnbiasedAcrossNodes, −0.3 % to +1.2 % this way). With several
// sidecars on a node the last batch's sender is ahead of the others, so
// rates read a little low, not high. A flush with no traffic sends no
// batch, so on a node whose only traffic is the key itself the end depends
// on the key again.
func (s *Sketch) dataEnd() int64 { return max(s.fed, s.now-int64(s.cfg.Lead)) }

// coverStart is where the traffic counted in slot n starts, fed being
// where the traffic counted before it ended (the last batch before the slot
// began; 0: none). A slot's counts are the batches that arrived in it, and
// each carries the traffic since its sender's previous flush: with many
// senders flushing regularly at their own phases, from the slot's start
// minus Lead/2 on average. But a slot boundary falls more often in a long
// gap between batches than in a short one, so where flushes are irregular
// (a sender descheduled or late, a busy node) its first batch carries
// traffic from further back, and counting the slot from Lead/2 before its
// start read the one-slot rate high: +5 % summed over a fleet
// (TestRatesUnbiasedWithLateBatches), enough to put a key at 0.95 × its
// threshold over it. So the slot counts from the earlier of the two: the
// end of the traffic counted before it, when that is further back, within
// half a slot of the slot's start (a batch after a long pause carries a
// flush period of traffic, not the pause; at worst a key's rate then reads
// low for that slot, never high). The same sum read +2.7 % at 0.95/s per
// node and +1.4 % at 5/s this way; what is left comes from senders' later
// batches, which the agent cannot date without the senders saying when
// they flushed.
func (s *Sketch) coverStart(n, fed int64) int64 {
	start := n * s.slotDur
	cs := start - int64(s.cfg.Lead)/2
	if fed > 0 {
		cs = max(min(cs, fed), start-s.slotDur/2)
	}
	return cs
}

// item computes entry x's counts and rates (see Top).
func (s *Sketch) item(x int32) Item {
	S := int64(s.cfg.Slots)
	e := &s.ents[x]
	end := s.dataEnd()
	minSpan := int64(s.cfg.MinSpan)
	// Where the current slot's counts start (coverStart).
	cs := s.coverStart(s.cur, s.slotFed)
	// The ring covers S-1 whole slots before the current one and the current
	// one up to end; dividing by the whole window would read 1/S low. Kept
	// within [S-1, S] slots (cs is an average), so that a slot leaving the
	// window raises an average by at most S/(S-1) (TakeUpdated).
	covered := min(max(end-cs, 0), s.slotDur) + (S-1)*s.slotDur
	span := min(max(end-e.since, minSpan), max(covered, minSpan))
	avg := func(v uint64) float64 { return float64(v) * 1e9 / float64(span) }
	c := s.slots[int(x)*s.cfg.Slots+int(s.cur%S)]
	// A one-slot sliding window ending at end: the current slot's counts
	// (from cs, or from since if the key came in this slot) plus the share
	// of the previous slot's that falls within one slot of end, their counts
	// taken as spread evenly over the time they cover (from since, if the
	// key came in that slot). It never starts before since, so a key counted
	// only lately (admitted or pinned) is rated over the time it was
	// counted, not read low for a slot.
	lo := max(end-s.slotDur, e.since)
	var p slot
	prevShare := 0.0
	if e.sinceS < s.cur {
		if S > 1 {
			p = s.slots[int(x)*s.cfg.Slots+int((s.cur-1)%S)]
			from := max(s.coverStart(s.cur-1, s.prevFed), e.since)
			if pl := cs - from; pl > 0 {
				prevShare = min(max(float64(min(cs, end)-max(lo, from))/float64(pl), 0), 1)
			}
		} else {
			lo = max(lo, cs) // one slot: the ring holds the current one only
		}
	}
	recentSpan := float64(max(end-lo, minSpan))
	recent := func(a, b uint32) float64 {
		return (float64(a) + float64(b)*prevShare) * 1e9 / recentSpan
	}
	it := Item{
		Key: e.key, Score: e.score, Reads: e.reads, Writes: e.writes, Bytes: e.nbytes, Pinned: e.pinned, Families: s.families(e),
		ReadAvg: avg(e.reads), WriteAvg: avg(e.writes), ByteAvg: avg(e.nbytes),
		ReadRecent: recent(c.reads, p.reads), WriteRecent: recent(c.writes, p.writes),
	}
	it.ReadRate = max(it.ReadAvg, it.ReadRecent)
	it.WriteRate = max(it.WriteAvg, it.WriteRecent)
	it.ByteRate = max(it.ByteAvg, recent(c.nbytes, p.nbytes))
	return it
}

// Len is the number of keys stored, pinned ones included.
func (s *Sketch) Len() int { return len(s.heap) + len(s.pinned) }
