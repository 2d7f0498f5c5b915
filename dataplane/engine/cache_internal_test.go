package engine

import (
	"strconv"
	"testing"
	"time"
)

// TestCacheInvalidationStateBounded: the per-key state invalidations leave
// stays bounded however many distinct keys are invalidated (the table's
// keys change over a process' life, and each was invalidated by writes),
// and the guard it exists for still holds across the bound: a fill that
// read before an invalidation of its key is never stored, even when that
// key's record was dropped since, while a fill that started after is.
func TestCacheInvalidationStateBounded(t *testing.T) {
	c := newCache(1000, 1<<30)
	now := time.Unix(1000, 0)
	ft := fillTimes{started: now, done: now, expires: now.Add(time.Hour)}
	const keys = 100_000
	for i := range keys {
		k := "key:" + strconv.Itoa(i)
		c.put(keyID(k), c.seq(), []byte("v"), true, ft)
		c.invalidate(k)
	}
	if n := len(c.inval); n > maxInvalidations {
		t.Fatalf("after %d distinct keys invalidated, %d keys' invalidation records kept; want at most %d", keys, n, maxInvalidations)
	}
	if n, _ := c.stats(); n != 0 {
		t.Fatalf("%d entries left after every key was invalidated", n)
	}

	// A fill of hot reads, then hot is invalidated (a write), then so many
	// other keys are that hot's record is dropped: the fill is refused.
	seq := c.seq()
	c.invalidate("hot")
	for i := range 2 * maxInvalidations {
		c.invalidate("other:" + strconv.Itoa(i))
	}
	if _, ok := c.inval["hot"]; ok {
		t.Fatal("hot's record was kept: the check below would not cross the bound")
	}
	if c.put(keyID("hot"), seq, []byte("stale"), true, ft) {
		t.Fatal("a fill that raced an invalidation was stored after the key's record was dropped")
	}
	// A fill that starts after the invalidation is stored.
	if !c.put(keyID("hot"), c.seq(), []byte("fresh"), true, ft) {
		t.Fatal("a fill after the invalidation was refused")
	}
	if v, _, ok, _ := c.get(keyID("hot"), now); !ok || string(v) != "fresh" {
		t.Fatalf("hot = %q, %v; want the fresh fill", v, ok)
	}

	// The same across invalidateAll and retain (a table change), which
	// drop every record.
	for name, drop := range map[string]func(){
		"invalidateAll": c.invalidateAll,
		"retain":        func() { c.retain(func(string) bool { return true }) },
	} {
		seq := c.seq()
		c.invalidate("warm")
		drop()
		if c.put(keyID("warm"), seq, []byte("stale"), true, ft) {
			t.Errorf("%s: a fill that raced an invalidation was stored", name)
		}
		if !c.put(keyID("warm"), c.seq(), []byte("fresh"), true, ft) {
			t.Errorf("%s: a fill after it was refused", name)
		}
	}
}
