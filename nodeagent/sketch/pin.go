package sketch

// Pins: keys the caller asks to be counted exactly, outside the ranking.

import (
	"hash/maphash"
	"slices"
	"strings"
)

// MaxPinned is the most keys Pin keeps at once: half the store, so pins
// never crowd out the keys the sketch finds by itself.
func (s *Sketch) MaxPinned() int { return s.m / 2 }

// Pin makes the sketch count key exactly from now on (or keep counting it,
// if it has been stored for longer than the window) and never evict it, whatever its traffic, until
// Unpin. Pinned keys are listed by Top with Pinned set, even with no
// traffic. The manager pins the keys near a threshold so that its sum over
// every node is exact rather than bounded. It returns false, and pins
// nothing, when MaxPinned keys are pinned already.
func (s *Sketch) Pin(key string) bool {
	h := maphash.String(s.seed, key)
	if x, ok := s.lookup(key, h); ok {
		e := &s.ents[x]
		if e.pinned {
			return true
		}
		if len(s.pinned) >= s.MaxPinned() {
			return false
		}
		s.heapRemove(int(e.hpos))
		e.pinned, e.hpos, e.pinAt = true, -1, s.now
		s.pinned = append(s.pinned, x)
		if e.sinceS > s.cur-int64(s.cfg.Slots) {
			// Admitted within the window: its counts start with the batch
			// that admitted it, and a key is admitted when it arrives, so for
			// a key with few arrivals per slot they read high (by about one
			// batch over the span). Summed over many nodes that bias adds up;
			// counting from the pin, a moment independent of the key's
			// arrivals, does not have it.
			clear(s.slots[int(x)*s.cfg.Slots : int(x+1)*s.cfg.Slots])
			e.reads, e.writes, e.nbytes, e.base, e.score = 0, 0, 0, 0, 0
			e.since, e.sinceS = s.pinSince(), s.cur
		}
		return true
	}
	if len(s.pinned) >= s.MaxPinned() {
		return false
	}
	if len(s.heap)+len(s.pinned) >= s.m {
		s.evict(s.heap[0])
	}
	x := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.ents[x] = entry{key: strings.Clone(key), hash: h, since: s.pinSince(), sinceS: s.cur, hpos: -1, pinned: true, pinAt: s.now}
	s.keyLen += len(key)
	for i := h & s.imask; ; i = (i + 1) & s.imask {
		if s.index[i] == 0 {
			s.index[i] = x + 1
			break
		}
	}
	s.pinned = append(s.pinned, x)
	return true
}

// Unpin returns key to the sketch's own ranking: it stays stored while its
// window holds counts and can be evicted like any other.
func (s *Sketch) Unpin(key string) {
	x, ok := s.lookup(key, maphash.String(s.seed, key))
	if !ok || !s.ents[x].pinned {
		return
	}
	i := slices.Index(s.pinned, x)
	s.pinned = slices.Delete(s.pinned, i, i+1)
	e := &s.ents[x]
	e.pinned = false
	if e.score == 0 {
		s.unindex(e.hash, x)
		s.keyLen -= len(e.key)
		*e = entry{}
		s.free = append(s.free, x)
		return
	}
	e.hpos = int32(len(s.heap))
	s.heap = append(s.heap, x)
	s.up(len(s.heap) - 1)
}

// Pinned returns the pinned keys, in no particular order.
func (s *Sketch) Pinned() []string {
	out := make([]string, len(s.pinned))
	for i, x := range s.pinned {
		out[i] = s.ents[x].key
	}
	return out
}

// PinsCounted reports whether every pinned key has been counted since its
// pin: a batch came after it, or more than Lead (the senders' flush
// period) has passed since it without one (the node's senders had nothing of it to
// flush: its count of zero is true). Until then a key pinned last has no
// count since its pin (its counts start at the last batch, pinSince), and
// a summary sent then would tell the manager an exact rate of zero while
// its traffic waits in the senders: the manager unpins a key whose exact
// rate fell that low, and a hot key was pinned, read as zero and unpinned
// again, over and over, and never mitigated (test/skew
// TestSkewPreviousManager, whose manager chooses pins at its own pace).
// The wait is bounded by Lead, so that over a fleet the last node's echo,
// which the manager's exact count waits for, comes within a flush period
// of the pin whatever the node's traffic. The agent's summary that echoes
// a new pin waits for this.
func (s *Sketch) PinsCounted() bool {
	for _, x := range s.pinned {
		if e := &s.ents[x]; e.since >= s.fed && s.now-e.pinAt <= int64(s.cfg.Lead) {
			return false
		}
	}
	return true
}

// pinSince is where the counts of a key pinned now start: the first batch
// after the pin carries traffic from its sender's previous flush, which is
// where the counts so far end, a moment independent of the key: the last
// batch (fed). Not dataEnd, which runs on with the clock a flush period
// after the last batch: when flushes are late (a busy node, the fleet
// simulator behind real time) the next batch still carries the traffic
// since the last one, and counting the key from later read it high (+3 %
// summed over 3,000 nodes at 0.95/s each with flushes up to 60 ms late,
// TestRatesUnbiasedWithLateBatches; at 1,000 simulated nodes a quarter of a
// second behind, a counter at 0.95 × its threshold read 1,090-1,170 on its
// first exact sums). A node with no batch for half a slot counts from a
// flush period ago, as dataEnd does.
func (s *Sketch) pinSince() int64 {
	if s.fed > 0 && s.fed >= s.now-s.slotDur/2 {
		return s.fed
	}
	return s.dataEnd()
}
