package capture

import (
	"bytes"
	"hash/maphash"

	"github.com/heatsink-dev/heatsink/routing"
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
	return a.entryHashed(key, a.hash(key), max)
}

// hash is key's hash in a (its seed made at the first use).
func (a *aggTable) hash(key []byte) uint64 {
	if a.slots == nil {
		a.seed = maphash.MakeSeed()
		a.slots = make([]aggSlot, aggMinSlots)
	}
	return maphash.Bytes(a.seed, key)
}

// touch reads the slot where a probe for hash h starts, and the entry it
// names if its tag matches: see aggBatch.
func (a *aggTable) touch(h uint64) uint32 {
	s := a.slots[h&uint64(len(a.slots)-1)]
	if s.idx != 0 && s.tag == uint32(h>>32) {
		return uint32(len(a.entries[s.idx-1].Key))
	}
	return s.idx
}

// entryHashed is entry with the key's hash (a.hash) already computed.
func (a *aggTable) entryHashed(key []byte, h uint64, max int) *sidecarlink.Entry {
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

// aggBatch holds the commands (and reply sizes) of a few packets before
// they are added to the key tables.
//
// Why: at one command per packet over many keys, nearly every command's
// key is new in its interval and its probe's first slot is a cache miss
// (the table is cold after the reader slept between two ring blocks): in
// the capture bench that one load was a quarter of the capture's CPU. One
// at a time, each miss stalls the parse that follows it; drained
// together, a first pass reads every probe's slot (touch: loads that do
// not depend on one another, so the processor has many misses in flight
// at once) and the second pass adds the keys from the cache. The adds are
// made in the order the commands came, so what is counted and what a
// full table drops are the same as one at a time.
type aggBatch struct {
	items []aggItem
	// keys holds the items' keys (the parser reuses its buffer at the
	// next command).
	keys []byte
	// touched keeps the first pass's loads from being optimised away.
	touched uint32
}

// aggItem is a command's add (write, size: the request's) or, reply, a
// matched reply's size.
type aggItem struct {
	h      uint64
	off, n uint32
	ti     int32
	write  bool
	reply  bool
	size   uint32
	fam    routing.Families
}

// aggBatchMax bounds a batch: enough misses to overlap, few enough that
// its keys stay in the cache.
const aggBatchMax = 64
