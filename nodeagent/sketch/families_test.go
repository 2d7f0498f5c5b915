package sketch

import (
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// TestFamiliesOfTheLastWindows: a key's families are ORed over what its
// batches said in the current window and the one before, families without
// counts mark only a stored key, and a family not seen for two windows
// is forgotten (a key whose clients stopped sending scripts may be split
// again).
func TestFamiliesOfTheLastWindows(t *testing.T) {
	s := mustNew(t, Config{K: 16, Window: time.Second, Slots: 4})
	now := t0
	s.Advance(now)
	fams := func(key string) routing.Families {
		for _, it := range s.AppendItems(nil) {
			if it.Key == key {
				return it.Families
			}
		}
		return 0
	}
	s.UpdateFamilies("q", 0, 0, 0, routing.FamOrdered) // not stored: admits nothing
	if s.Len() != 0 {
		t.Fatalf("families alone admitted a key: %d stored", s.Len())
	}
	s.UpdateFamilies("q", 0, 5, 0, routing.FamOrdered)
	s.UpdateFamilies("q", 5, 0, 0, 0)
	s.UpdateFamilies("q", 0, 0, 0, routing.FamScript)
	if got, want := fams("q"), routing.FamOrdered|routing.FamScript; got != want {
		t.Fatalf("families %v, want %v", got, want)
	}
	// The next window: the previous one's families still count.
	for range 4 {
		now = now.Add(250 * time.Millisecond)
		s.Advance(now)
		s.UpdateFamilies("q", 0, 5, 0, routing.FamOrdered)
	}
	if got, want := fams("q"), routing.FamOrdered|routing.FamScript; got != want {
		t.Fatalf("one window later: families %v, want %v", got, want)
	}
	// Two windows without a script: forgotten.
	for range 4 {
		now = now.Add(250 * time.Millisecond)
		s.Advance(now)
		s.UpdateFamilies("q", 0, 5, 0, routing.FamOrdered)
	}
	if got, want := fams("q"), routing.FamOrdered; got != want {
		t.Fatalf("two windows later: families %v, want %v", got, want)
	}
}
