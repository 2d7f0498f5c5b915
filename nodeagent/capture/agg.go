package capture

import (
	"bytes"
	"hash/maphash"

	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// aggTable is one target's counts per key since the last flush.
//
// Why not a map[string]: at one command per packet over a large key space
// (the capture bench's 100,000 random keys), nearly every command is a key
// new in its interval. A map costs two allocations per new key (the key as
// a string and as the entry's bytes), an insert, a delete once the key goes
// cold, and the garbage collector's work on all of them: about half of the
// capture's CPU in that bench. Here keys are copied into one arena and
// indexed by an open-addressing table, both reused from one interval to the
// next: a new key costs a hash, a probe and a copy, and an interval ends by
// clearing them.
type aggTable struct {
	seed    maphash.Seed
	slots   []aggSlot
	entries []sidecarlink.Entry
	// arena holds the entries' keys (Entry.Key slices it). When an append
	// moves it, keys already handed out keep the old array alive until
	// the flush, which is all they need.
	arena []byte
}

// aggSlot indexes entries: idx is the entry's index + 1 (0: empty), tag
// the high half of the key's hash (most probes of other keys end there).
type aggSlot struct{ idx, tag uint32 }

const (
	aggMinSlots = 1 << 10
	// aggKeepArena: an arena more than four times what the last interval
	// used and larger than this is dropped at the flush (a burst's arena
	// is not kept for ever).
	aggKeepArena = 256 << 10
)

// entry returns the entry of key, added if it is new and the table holds
// fewer than max keys; nil if it is full.
func (a *aggTable) entry(key []byte, max int) *sidecarlink.Entry {
	if a.slots == nil {
		a.seed = maphash.MakeSeed()
		a.slots = make([]aggSlot, aggMinSlots)
	}
	h := maphash.Bytes(a.seed, key)
	tag, mask := uint32(h>>32), uint64(len(a.slots)-1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := a.slots[i]
		if s.idx == 0 {
			if len(a.entries) >= max {
				return nil
			}
			start := len(a.arena)
			a.arena = append(a.arena, key...)
			a.entries = append(a.entries, sidecarlink.Entry{Key: a.arena[start:len(a.arena):len(a.arena)]})
			a.slots[i] = aggSlot{idx: uint32(len(a.entries)), tag: tag}
			if 2*len(a.entries) > len(a.slots) {
				a.grow()
			}
			return &a.entries[len(a.entries)-1]
		}
		if s.tag == tag && bytes.Equal(a.entries[s.idx-1].Key, key) {
			return &a.entries[s.idx-1]
		}
	}
}

// grow doubles the slots (at most half are in use, so probes stay short).
func (a *aggTable) grow() {
	a.slots = make([]aggSlot, 2*len(a.slots))
	mask := uint64(len(a.slots) - 1)
	for n := range a.entries {
		h := maphash.Bytes(a.seed, a.entries[n].Key)
		i := h & mask
		for a.slots[i].idx != 0 {
			i = (i + 1) & mask
		}
		a.slots[i] = aggSlot{idx: uint32(n + 1), tag: uint32(h >> 32)}
	}
}

// reset empties the table for the next interval, keeping its memory (the
// entries handed out by the flush are no longer used).
func (a *aggTable) reset() {
	clear(a.slots)
	clear(a.entries) // the keys they slice are the arena's
	a.entries = a.entries[:0]
	if cap(a.arena) > aggKeepArena && cap(a.arena) > 4*len(a.arena) {
		a.arena = nil
	}
	a.arena = a.arena[:0]
}
