package sketch

// The store: the entries of the keys held, their open-addressing index and
// the min-heap of scores that picks the weakest for eviction.

import "strings"

// admit stores key on the batch that brought it. That batch carries the
// Lead before it arrived, so the key's counts cover traffic from then.
func (s *Sketch) admit(key string, h, est uint64, reads, writes, nbytes uint32, w uint64) *entry {
	x := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	e := &s.ents[x]
	base := uint64(0)
	if est > w {
		base = est - w
	}
	*e = entry{key: strings.Clone(key), hash: h, base: base, score: base, since: s.now - int64(s.cfg.Lead), sinceS: s.cur, hpos: int32(len(s.heap))}
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
	return e
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
