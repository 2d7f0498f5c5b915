// Package sketch finds the heaviest keys of a stream over a sliding window in
// memory that is bounded whatever the number of distinct keys.
//
// It is a two-level structure, chosen by measurement (docs/detector.md):
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
	"slices"
	"strings"
	"time"
	"unsafe"
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
	key     string
	hash    uint64
	score   uint64 // base + weighted window counts: the ranking
	base    uint64 // HeavyKeeper's estimate inherited at admission
	reads   uint64 // window totals since admission
	writes  uint64
	nbytes  uint64
	since   int64 // admission time, ns
	last    int64 // last update, ns
	sinceS  int64 // admission slot number
	hpos    int32 // place in the heap; -1 while pinned
	pinned  bool
	updated bool // listed in Sketch.updated
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
	keyLen  int // bytes of stored keys
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
	s.UpdateHashed(key, maphash.String(s.seed, key), reads, writes, nbytes)
}

// UpdateHashed is Update with h = s.Hash(key).
func (s *Sketch) UpdateHashed(key string, h uint64, reads, writes, nbytes uint32) {
	w := uint64(reads)*uint64(s.cfg.ReadWeight) + uint64(writes)*uint64(s.cfg.WriteWeight)
	if w == 0 {
		return
	}
	for i := h & s.imask; ; i = (i + 1) & s.imask {
		x := s.index[i]
		if x == 0 {
			break
		}
		e := &s.ents[x-1]
		if e.hash == h && e.key == key {
			s.add(x-1, e, reads, writes, nbytes, w)
			if !e.pinned {
				s.down(int(e.hpos))
			}
			return
		}
	}
	est := s.filter(h, w)
	if len(s.heap)+len(s.pinned) < s.m {
		s.admit(key, h, est, reads, writes, nbytes, w)
		return
	}
	if len(s.heap) > 0 && est > s.ents[s.heap[0]].score {
		s.evict(s.heap[0])
		s.admit(key, h, est, reads, writes, nbytes, w)
	}
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
	e.last = s.now
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

func (s *Sketch) admit(key string, h, est uint64, reads, writes, nbytes uint32, w uint64) {
	x := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	e := &s.ents[x]
	base := uint64(0)
	if est > w {
		base = est - w
	}
	*e = entry{key: strings.Clone(key), hash: h, base: base, score: base, since: s.now, sinceS: s.cur, hpos: int32(len(s.heap))}
	s.keyLen += len(key)
	s.add(x, e, reads, writes, nbytes, w)
	for i := h & s.imask; ; i = (i + 1) & s.imask {
		if s.index[i] == 0 {
			s.index[i] = x + 1
			break
		}
	}
	s.heap = append(s.heap, x)
	s.up(len(s.heap) - 1)
}

// evict removes entry x from the index, the heap and its slots.
func (s *Sketch) evict(x int32) {
	e := &s.ents[x]
	s.unindex(e.hash, x)
	s.heapRemove(int(e.hpos))
	clear(s.slots[int(x)*s.cfg.Slots : int(x+1)*s.cfg.Slots])
	s.keyLen -= len(e.key)
	*e = entry{}
	s.free = append(s.free, x)
}

// unindex deletes x from the linear-probing index by backward shift, so no
// tombstones accumulate.
func (s *Sketch) unindex(h uint64, x int32) {
	i := h & s.imask
	for s.index[i] != x+1 {
		i = (i + 1) & s.imask
	}
	for {
		s.index[i] = 0
		j := i
		for {
			j = (j + 1) & s.imask
			y := s.index[j]
			if y == 0 {
				return
			}
			home := s.ents[y-1].hash & s.imask
			// Move y back to i unless its home lies cyclically in (i, j].
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				s.index[i] = y
				i = j
				break
			}
		}
	}
}

func (s *Sketch) less(a, b int) bool { return s.ents[s.heap[a]].score < s.ents[s.heap[b]].score }

func (s *Sketch) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.ents[s.heap[a]].hpos = int32(a)
	s.ents[s.heap[b]].hpos = int32(b)
}

func (s *Sketch) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Sketch) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && s.less(r, l) {
			c = r
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

func (s *Sketch) heapRemove(i int) {
	last := len(s.heap) - 1
	if i != last {
		s.swap(i, last)
	}
	s.heap = s.heap[:last]
	if i < last {
		s.down(i)
		s.up(i)
	}
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
		e.pinned, e.hpos = true, -1
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
			e.since, e.last, e.sinceS = s.now, s.now, s.cur
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
	s.ents[x] = entry{key: strings.Clone(key), hash: h, since: s.now, last: s.now, sinceS: s.cur, hpos: -1, pinned: true}
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

func (s *Sketch) lookup(key string, h uint64) (int32, bool) {
	for i := h & s.imask; ; i = (i + 1) & s.imask {
		x := s.index[i]
		if x == 0 {
			return 0, false
		}
		if e := &s.ents[x-1]; e.hash == h && e.key == key {
			return x - 1, true
		}
	}
}

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
	for j := range page {
		c := uint64(page[j].count)
		for n := uint32(0); n < k && c != 0; n++ { // c strictly falls: decayN < 1024
			c = c * uint64(s.decayN) >> 10
		}
		page[j].count = uint32(c)
	}
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
	// add each apart and take the larger of the sums (fleet.KeyRates).
	ReadAvg, WriteAvg, ByteAvg float64
	ReadRecent, WriteRecent    float64
	// Pinned is set for keys held by Pin: their counts are exact since the
	// key was stored (pinned, or earlier).
	Pinned bool
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

// item computes entry x's counts and rates (see Top).
func (s *Sketch) item(x int32) Item {
	S := int64(s.cfg.Slots)
	window := s.cfg.Window.Nanoseconds()
	curStart := s.cur * s.slotDur
	inCur := min(max(s.now-curStart, 0), s.slotDur)
	e := &s.ents[x]
	// Counts reach up to the key's last batch; once it misses a batch
	// (quiet for more than Lead) the span runs on with the clock, so the
	// rate of a key that stopped falls.
	end := max(e.last, s.now-int64(s.cfg.Lead))
	// The window's counts cover S-1 whole slots and the current one so far;
	// dividing them by the whole window would read 1/S low.
	// Each batch also carries the Lead before it arrived.
	covered := (S-1)*s.slotDur + inCur + int64(s.cfg.Lead)
	span := min(max(end-e.since+int64(s.cfg.Lead), int64(s.cfg.MinSpan)), window+int64(s.cfg.Lead), covered)
	avg := func(v uint64) float64 { return float64(v) * 1e9 / float64(span) }
	c := s.slots[int(x)*s.cfg.Slots+int(s.cur%S)]
	var p slot
	if e.sinceS < s.cur && S > 1 {
		p = s.slots[int(x)*s.cfg.Slots+int((s.cur-1)%S)]
	}
	// A one-slot sliding window: the current partial slot plus the share of
	// the previous slot that is still within one slot of the data's end
	// (end, as for the average: the key's last batch, or Lead ago). The
	// current slot's batches carry traffic from Lead before they arrived, so
	// the current slot covers its time up to end plus Lead, and the previous
	// slot contributes the rest of one slot.
	inData := min(max(end-curStart, 0), s.slotDur)
	prevShare := max(float64(s.slotDur-inData-int64(s.cfg.Lead)), 0) / float64(s.slotDur)
	recentSpan := float64(max(s.slotDur, inData+int64(s.cfg.Lead)))
	recent := func(a, b uint32) float64 {
		return (float64(a) + float64(b)*prevShare) * 1e9 / recentSpan
	}
	it := Item{
		Key: e.key, Score: e.score, Reads: e.reads, Writes: e.writes, Bytes: e.nbytes, Pinned: e.pinned,
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
