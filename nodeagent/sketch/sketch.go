// Package sketch finds the heaviest keys of a stream over a sliding window in
// memory that is bounded whatever the number of distinct keys.
//
// It is a two-level structure, chosen by measurement (docs/node-agent.md):
//
//   - An admission filter, HeavyKeeper (Gong et al., USENIX ATC 2018): d rows
//     of w buckets holding a 32-bit fingerprint and a count. A key's bucket
//     either counts it (fingerprints match), or is taken over when empty, or
//     decays by one with probability b^-count. Cold keys therefore cannot
//     accumulate counts by colliding with each other, which is what makes it
//     more precise than Count-Min or Space-Saving on heavy-tailed (Zipf)
//     traffic at a few tens of KiB. Its counts halve every slot, so that a
//     key turning hot can displace a cooling one quickly.
//   - A store of m > K candidates with exact per-slot counts since admission,
//     kept in an open-addressing index and a min-heap by window score. A key
//     enters when its HeavyKeeper estimate beats the store's minimum; its
//     reads, writes and value bytes are tracked apart in a ring of S slots,
//     so when a slot leaves the window its counts are subtracted exactly.
//
// Update is the hot path: one hash, one index probe, and for keys outside the
// store d bucket updates; it never allocates except to copy a key admitted to
// the store. Time enters only through Advance, which the caller invokes once
// per batch, so the window costs nothing per observation.
//
// A Sketch is not safe for concurrent use.
package sketch

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"time"
	"unsafe"

	"github.com/heatsink-dev/heatsink/routing"
)

// Config sizes a Sketch.
type Config struct {
	// K is the number of keys the caller wants; the store holds more (see
	// StoreFactor) so that keys ranked near K are not evicted by churn.
	K int
	// MemoryBytes is the budget for the whole structure, keys included
	// (estimated at AvgKeyLen bytes each). Default 64 KiB.
	MemoryBytes int
	// Window is the sliding window. Default 10s.
	Window time.Duration
	// Slots divides the window; expiry is exact at slot granularity.
	// Default 10.
	Slots int
	// ReadWeight and WriteWeight weigh reads and writes in the ranking score,
	// so that a write-hot key (lower threshold) can outrank a read-hot one.
	// Default 1 and 1.
	ReadWeight, WriteWeight uint32
	// Lead is how much traffic a key's first counted batch covers before it
	// arrived (the senders' flush period): rates are measured from
	// admission minus Lead. Default 0.
	Lead time.Duration
	// MinSpan is the shortest time a rate is measured over, so that a key's
	// first batches do not read as a huge rate. Default a quarter slot.
	MinSpan time.Duration
	// FadePercent is what remains of the filter's counts at each slot
	// boundary. Default 50: see fade.
	FadePercent int
	// AvgKeyLen is used only to plan the memory budget. Default 24.
	AvgKeyLen int
	// StoreFactor is store entries per K, in percent. Default 150.
	StoreFactor int
	// Rows is HeavyKeeper's depth. Default 2.
	Rows int
}

// Defaulted returns c with defaults filled in, or why it is invalid.
func (c Config) Defaulted() (Config, error) {
	err := c.defaults()
	return c, err
}

func (c *Config) defaults() error {
	if c.K <= 0 {
		return fmt.Errorf("sketch: K must be positive, got %d", c.K)
	}
	c.MemoryBytes = cmp.Or(c.MemoryBytes, 64<<10)
	c.Window = cmp.Or(c.Window, 10*time.Second)
	c.Slots = cmp.Or(c.Slots, 10)
	c.ReadWeight = cmp.Or(c.ReadWeight, 1)
	c.WriteWeight = cmp.Or(c.WriteWeight, 1)
	c.MinSpan = cmp.Or(c.MinSpan, c.Window/time.Duration(c.Slots)/4)
	c.FadePercent = cmp.Or(c.FadePercent, 50)
	c.AvgKeyLen = cmp.Or(c.AvgKeyLen, 24)
	c.StoreFactor = cmp.Or(c.StoreFactor, 150)
	c.Rows = cmp.Or(c.Rows, 2)
	switch {
	case c.Slots < 1 || c.Slots > 600:
		return fmt.Errorf("sketch: Slots must be in [1, 600], got %d", c.Slots)
	case c.Window < time.Duration(c.Slots)*time.Millisecond:
		return fmt.Errorf("sketch: Window %v is shorter than %d slots of 1ms", c.Window, c.Slots)
	case c.Rows < 1 || c.Rows > 3:
		return fmt.Errorf("sketch: Rows must be in [1, 3], got %d", c.Rows)
	case c.MemoryBytes < 4<<10:
		return fmt.Errorf("sketch: MemoryBytes must be at least 4 KiB, got %d", c.MemoryBytes)
	}
	return nil
}

// entry is one stored candidate. Its per-slot counts live in Sketch.slots.
type entry struct {
	key    string
	hash   uint64
	score  uint64 // base + weighted window counts: the ranking
	base   uint64 // HeavyKeeper's estimate inherited at admission
	reads  uint64 // window totals since admission
	writes uint64
	nbytes uint64
	// since is when the traffic its counts cover starts, ns (see item):
	// admission minus Lead, or at a pin where the counted traffic ended.
	since   int64
	sinceS  int64 // admission slot number
	pinAt   int64 // when it was pinned, ns (PinsCounted)
	hpos    int32 // place in the heap; -1 while pinned
	pinned  bool
	updated bool // listed in Sketch.updated
	// fam are the command families counted in window number famWin
	// (slot number ÷ Slots), famOld those of the window before it: a
	// key's families are those of the last one to two windows (families).
	fam, famOld routing.Families
	famWin      int64
}

type slot struct{ reads, writes, nbytes uint32 }

type bucket struct{ fp, count uint32 }

// decayBase is HeavyKeeper's b = 1.08, the paper's choice.
const decayBase = 1.08

// decayTable[c] is b^-c scaled to 2^64; counts past the table never decay.
var decayTable = func() (t [512]uint64) {
	t[0] = math.MaxUint64
	for c := 1; c < len(t); c++ {
		t[c] = uint64(math.Pow(decayBase, -float64(c)) * (1 << 63) * 2)
	}
	return t
}()

// Sketch is a windowed heavy-hitter sketch.
type Sketch struct {
	cfg     Config
	seed    maphash.Seed
	slotDur int64

	rows  int
	width uint64   // buckets per row; any size (fastrange), so no budget is lost to rounding
	hk    []bucket // rows × width
	// The filter fades lazily, a page of pageSize buckets at a time: fades
	// counts the fades due so far and pageFades[p] those page p has had
	// (see fade and catchUp).
	fades     uint32
	pageFades []uint32
	rng       uint64
	decayN    uint32 // FadePercent in 1/1024

	m     int
	ents  []entry
	slots []slot  // m × S ring, slot ring index = slot number % S
	index []int32 // entry index + 1; 0 empty
	imask uint64
	heap  []int32
	free  []int32
	// pinned holds the entries that are counted whatever their score: kept
	// out of the heap, so never evicted nor dropped when their window
	// empties (see Pin).
	pinned []int32
	// updated lists the entries updated since the last TakeUpdated (at
	// most m; overflow is set past that).
	updated  []int32
	overflow bool

	cur     int64 // current slot number
	ring    int   // cur % Slots: the current slot's place in each ring
	started int64 // first Advance, ns
	now     int64
	// fed is the time of the last batch counted (any key): see dataEnd.
	fed int64
	// slotFed and prevFed are fed as it stood when the current slot and the
	// previous one began: where the traffic counted in the slots before
	// each ended (see coverStart).
	slotFed, prevFed int64
	keyLen           int // bytes of stored keys
}

// New builds a Sketch. It fails on a budget too small for K.
func New(cfg Config) (*Sketch, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &Sketch{cfg: cfg, seed: maphash.MakeSeed(), slotDur: int64(cfg.Window) / int64(cfg.Slots), rows: cfg.Rows, rng: 0x9e3779b97f4a7c15}
	// Plan within 15/16 of the budget: the allocator rounds keys and slices
	// up to size classes, and the measured heap must stay within budget.
	budget := cfg.MemoryBytes - cfg.MemoryBytes/16 - int(unsafe.Sizeof(Sketch{}))
	perEntry := int(unsafe.Sizeof(entry{})) + cfg.Slots*int(unsafe.Sizeof(slot{})) + 4*2 + 4 + 4 + cfg.AvgKeyLen
	m := cfg.K * cfg.StoreFactor / 100
	if m < cfg.K {
		m = cfg.K
	}
	// Keep at least a third of the budget for the filter; shrink the store
	// (and so the precision) if the budget is too small.
	if maxM := (budget * 2 / 3) / perEntry; m > maxM {
		m = maxM
	}
	if m < 1 {
		return nil, fmt.Errorf("sketch: %d bytes cannot hold one entry", cfg.MemoryBytes)
	}
	s.m = m
	idx := 1 << bits.Len(uint(2*m-1)) // ≥ 2m, power of two
	rest := budget - m*(perEntry-8) - idx*4
	if rest < 64*8*cfg.Rows {
		return nil, fmt.Errorf("sketch: %d bytes leave no room for the filter", cfg.MemoryBytes)
	}
	// 8 bytes a bucket, and a page's 4-byte fade count per pageSize.
	width := rest * pageSize / (8*pageSize + 4) / cfg.Rows
	if width < 64 {
		return nil, fmt.Errorf("sketch: %d bytes leave no room for the filter", cfg.MemoryBytes)
	}
	s.width = uint64(width)
	s.hk = make([]bucket, cfg.Rows*width)
	s.pageFades = make([]uint32, (len(s.hk)+pageSize-1)/pageSize)
	s.decayN = uint32(1024 * cfg.FadePercent / 100)
	s.ents = make([]entry, m)
	s.slots = make([]slot, m*cfg.Slots)
	s.index = make([]int32, idx)
	s.imask = uint64(idx - 1)
	s.heap = make([]int32, 0, m)
	s.free = make([]int32, m)
	for i := range s.free {
		s.free[i] = int32(m - 1 - i)
	}
	s.started = -1
	return s, nil
}

// Capacity is the number of keys the store holds.
func (s *Sketch) Capacity() int { return s.m }

// Bytes is the memory the sketch holds now, keys included.
func (s *Sketch) Bytes() int {
	return len(s.hk)*8 + len(s.pageFades)*4 + s.m*int(unsafe.Sizeof(entry{})) + len(s.slots)*int(unsafe.Sizeof(slot{})) +
		len(s.index)*4 + s.m*8 + s.keyLen
}

// Config returns the configuration in effect, defaults filled in.
func (s *Sketch) Config() Config { return s.cfg }

// Hash is the hash Update uses; a caller that already hashed the key (or a
// benchmark that pre-hashes its stream) can call UpdateHashed.
func (s *Sketch) Hash(key string) uint64 { return maphash.String(s.seed, key) }

// Update counts reads, writes and value bytes of key in the current slot. It
// does not retain key unless admitting it (then it copies it), so key may
// alias a reused buffer.
func (s *Sketch) Update(key string, reads, writes, nbytes uint32) {
	s.update(key, maphash.String(s.seed, key), reads, writes, nbytes, 0)
}

// UpdateFamilies is Update that also records the command families the
// counts came from (Item.Families). Families without counts are recorded
// only for a key the store holds: they admit nothing.
func (s *Sketch) UpdateFamilies(key string, reads, writes, nbytes uint32, fam routing.Families) {
	s.update(key, maphash.String(s.seed, key), reads, writes, nbytes, fam)
}

// UpdateHashed is Update with h = s.Hash(key).
func (s *Sketch) UpdateHashed(key string, h uint64, reads, writes, nbytes uint32) {
	s.update(key, h, reads, writes, nbytes, 0)
}

func (s *Sketch) update(key string, h uint64, reads, writes, nbytes uint32, fam routing.Families) {
	w := uint64(reads)*uint64(s.cfg.ReadWeight) + uint64(writes)*uint64(s.cfg.WriteWeight)
	if w == 0 {
		if fam != 0 {
			if x, ok := s.lookup(key, h); ok {
				s.markFamilies(&s.ents[x], fam)
			}
		}
		return
	}
	s.fed = s.now
	for i := h & s.imask; ; i = (i + 1) & s.imask {
		x := s.index[i]
		if x == 0 {
			break
		}
		e := &s.ents[x-1]
		if e.hash == h && e.key == key {
			s.markFamilies(e, fam)
			s.add(x-1, e, reads, writes, nbytes, w)
			if !e.pinned {
				s.down(int(e.hpos))
			}
			return
		}
	}
	est := s.filter(h, w)
	if len(s.heap)+len(s.pinned) < s.m {
		s.markFamilies(s.admit(key, h, est, reads, writes, nbytes, w), fam)
		return
	}
	if len(s.heap) > 0 && est > s.ents[s.heap[0]].score {
		s.evict(s.heap[0])
		s.markFamilies(s.admit(key, h, est, reads, writes, nbytes, w), fam)
	}
}

// markFamilies adds fam to e's families of the current window.
func (s *Sketch) markFamilies(e *entry, fam routing.Families) {
	if fam == 0 {
		return
	}
	w := s.cur / int64(s.cfg.Slots)
	if e.famWin != w {
		e.famOld = 0
		if e.famWin == w-1 {
			e.famOld = e.fam
		}
		e.fam, e.famWin = 0, w
	}
	e.fam |= fam
}

// families are e's families of the current window and the one before.
func (s *Sketch) families(e *entry) routing.Families {
	switch w := s.cur / int64(s.cfg.Slots); e.famWin {
	case w:
		return e.fam | e.famOld
	case w - 1:
		return e.fam
	}
	return 0
}

func (s *Sketch) add(x int32, e *entry, reads, writes, nbytes uint32, w uint64) {
	sl := &s.slots[int(x)*s.cfg.Slots+s.ring]
	sl.reads += reads
	sl.writes += writes
	sl.nbytes = satAdd(sl.nbytes, nbytes)
	e.reads += uint64(reads)
	e.writes += uint64(writes)
	e.nbytes += uint64(nbytes)
	e.score += w
	if !e.updated {
		if len(s.updated) < s.m {
			e.updated = true
			s.updated = append(s.updated, x)
		} else {
			s.overflow = true
		}
	}
}

func satAdd(a, b uint32) uint32 {
	if c := a + b; c >= a {
		return c
	}
	return math.MaxUint32
}

// Advance moves the window to now. Slots that leave the window are
// subtracted from every stored key, keys left with nothing are dropped, and
// the filter fades. Call it before each batch of Updates; time never goes
// backwards (an earlier now is ignored).
func (s *Sketch) Advance(now time.Time) {
	ns := now.UnixNano()
	sn := ns / s.slotDur
	if s.started < 0 {
		s.started, s.cur, s.now, s.ring = ns, sn, ns, int(sn%int64(s.cfg.Slots))
		return
	}
	if ns > s.now {
		s.now = ns
	}
	if sn <= s.cur {
		return
	}
	steps := min(sn-s.cur, int64(s.cfg.Slots))
	S := int64(s.cfg.Slots)
	for k := int64(1); k <= steps; k++ {
		r := int((s.cur + k) % S)
		for _, set := range [2][]int32{s.heap, s.pinned} {
			for _, x := range set {
				e := &s.ents[x]
				sl := &s.slots[int(x)*s.cfg.Slots+r]
				e.reads -= uint64(sl.reads)
				e.writes -= uint64(sl.writes)
				e.nbytes -= uint64(sl.nbytes)
				*sl = slot{}
			}
		}
		s.fade()
	}
	if sn == s.cur+1 {
		s.prevFed = s.slotFed
	} else {
		s.prevFed = s.fed // the slot before this one had no batch
	}
	s.slotFed = s.fed
	s.cur, s.ring = sn, int(sn%S)
	// Recompute scores; drop keys with nothing left in the window; an
	// inherited estimate expires with the slot it was admitted in.
	for i := 0; i < len(s.heap); {
		x := s.heap[i]
		e := &s.ents[x]
		if e.sinceS <= s.cur-S {
			e.base = 0
		}
		e.score = e.base + e.reads*uint64(s.cfg.ReadWeight) + e.writes*uint64(s.cfg.WriteWeight)
		if e.score == 0 {
			s.unindex(e.hash, x)
			s.keyLen -= len(e.key)
			*e = entry{}
			s.free = append(s.free, x)
			last := len(s.heap) - 1
			s.heap[i] = s.heap[last]
			s.heap = s.heap[:last]
			continue
		}
		i++
	}
	for _, x := range s.pinned {
		e := &s.ents[x]
		if e.sinceS <= s.cur-S {
			e.base = 0
		}
		e.score = e.base + e.reads*uint64(s.cfg.ReadWeight) + e.writes*uint64(s.cfg.WriteWeight)
	}
	for i := range s.heap {
		s.ents[s.heap[i]].hpos = int32(i)
	}
	for i := len(s.heap)/2 - 1; i >= 0; i-- {
		s.down(i)
	}
}
