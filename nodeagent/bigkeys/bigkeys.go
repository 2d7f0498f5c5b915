// Package bigkeys keeps one policy's largest keys by value size on one node:
// a small top-N by size, apart from the rate sketch, so that a key that is
// huge and rarely read (which the sketch rightly forgets) is still listed.
//
// A key's size is the largest value one access of it read or wrote (a
// read's reply bytes, a write's request bytes) over the last one to two
// windows: sizes are kept per window, the current and the previous one, and
// a key seen in neither is dropped. So a key that shrank or was deleted
// leaves the list within two windows, and a huge key read once per window
// stays in it.
package bigkeys

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// DefaultWindow is how long one window of sizes lasts.
const DefaultWindow = 30 * time.Minute

// Top is a bounded set of the largest keys. It is not safe for concurrent
// use; the agent holds the policy's lock.
type Top struct {
	n      int
	window time.Duration
	start  time.Time
	idx    map[string]int
	ents   []ent
	// min is the smallest size in ents while full and minOK; a size not
	// over it cannot enter, which is the common case and costs one map
	// lookup.
	min   uint64
	minOK bool
}

type ent struct {
	key       string
	cur, prev uint64
}

func (e *ent) size() uint64 { return max(e.cur, e.prev) }

// New returns a Top of at most n keys (1 to
// agentlink.MaxBigKeysPerPolicy; out-of-range values are clamped) whose
// sizes age out over windows of window (DefaultWindow if not positive).
func New(n int, window time.Duration) *Top {
	n = min(max(n, 1), agentlink.MaxBigKeysPerPolicy)
	if window <= 0 {
		window = DefaultWindow
	}
	return &Top{n: n, window: window, idx: make(map[string]int, n)}
}

// Observe records that one access of key read or wrote size bytes, in the
// window of the last Advance (the agent advances once per batch). key may
// alias a reused buffer: it is copied when kept.
func (t *Top) Observe(key string, size uint64) {
	if size == 0 || key == "" {
		return
	}
	if i, ok := t.idx[key]; ok {
		e := &t.ents[i]
		if size > e.cur {
			e.cur = size
			t.minOK = false
		}
		return
	}
	if len(t.ents) < t.n {
		k := strings.Clone(key)
		t.idx[k] = len(t.ents)
		t.ents = append(t.ents, ent{key: k, cur: size})
		t.minOK = false
		return
	}
	if size <= t.smallest() {
		return
	}
	// Replace the smallest key (the first of equals).
	at := 0
	for i := range t.ents {
		if t.ents[i].size() < t.ents[at].size() {
			at = i
		}
	}
	delete(t.idx, t.ents[at].key)
	k := strings.Clone(key)
	t.ents[at] = ent{key: k, cur: size}
	t.idx[k] = at
	t.minOK = false
}

func (t *Top) smallest() uint64 {
	if !t.minOK {
		t.min = t.ents[0].size()
		for i := range t.ents {
			t.min = min(t.min, t.ents[i].size())
		}
		t.minOK = true
	}
	return t.min
}

// Advance starts a new window when the current one is over: the current
// sizes become the previous ones and keys seen in neither are dropped.
func (t *Top) Advance(now time.Time) {
	if t.start.IsZero() {
		t.start = now
		return
	}
	el := now.Sub(t.start)
	if el < t.window {
		return
	}
	gone := el >= 2*t.window // nothing was seen in the window just ended
	t.start = now
	keep := t.ents[:0]
	clear(t.idx)
	for _, e := range t.ents {
		e.prev, e.cur = e.cur, 0
		if gone {
			e.prev = 0
		}
		if e.prev > 0 {
			t.idx[e.key] = len(keep)
			keep = append(keep, e)
		}
	}
	clear(t.ents[len(keep):])
	t.ents = keep
	t.minOK = false
}

// Len is the number of keys kept.
func (t *Top) Len() int { return len(t.ents) }

// Append appends the keys kept to dst, largest first (equal sizes by key).
func (t *Top) Append(dst []agentlink.KeySize) []agentlink.KeySize {
	from := len(dst)
	for i := range t.ents {
		dst = append(dst, agentlink.KeySize{Key: t.ents[i].key, Bytes: t.ents[i].size()})
	}
	slices.SortFunc(dst[from:], func(a, b agentlink.KeySize) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return dst
}
