package demo

import (
	"fmt"
	"strconv"

	"github.com/heatsink-dev/heatsink/routing"
)

// Keys are the logical keys of the scenario.
type Keys struct {
	// ViralRead is the key that goes viral for reads.
	ViralRead string
	// Counter is the counter that goes viral for writes.
	Counter string
	// Event are the keys of the scheduled event.
	Event []string
	// Background is the prefix of the Zipf keys (prefix + rank).
	Background string
	// HotMaster is the index of the master that holds ViralRead and Counter.
	HotMaster int
}

// slotRange is the slots [Lo, Hi] a master serves.
type slotRange struct{ Lo, Hi uint16 }

// masterOf returns the index of the master serving key's slot, or -1.
func masterOf(ranges [][]slotRange, key string) int {
	s := routing.Slot(key)
	for i, rs := range ranges {
		for _, r := range rs {
			if s >= r.Lo && s <= r.Hi {
				return i
			}
		}
	}
	return -1
}

// chooseKeys picks the scenario's keys so that the viral read key and the
// viral counter land on the same master (the one that melts: the worst case,
// and what makes "hottest master ÷ mean" telling), and the event's keys on
// another one. The choice depends only on seed and the slot layout.
func chooseKeys(ranges [][]slotRange, seed int64) (Keys, error) {
	n := len(ranges)
	if n == 0 {
		return Keys{}, fmt.Errorf("no Redis masters")
	}
	hot := int(uint64(seed) % uint64(n))
	pick := func(prefix string, master int, from int) (string, int, error) {
		for i := from; i < from+100000; i++ {
			k := prefix + strconv.Itoa(i)
			if masterOf(ranges, k) == master {
				return k, i, nil
			}
		}
		return "", 0, fmt.Errorf("no key %s* on master %d", prefix, master)
	}
	base := int(uint64(seed) % 1000)
	k := Keys{Background: "user:", HotMaster: hot}
	var err error
	if k.ViralRead, _, err = pick("product:viral-", hot, base); err != nil {
		return k, err
	}
	if k.Counter, _, err = pick("likes:post:", hot, base); err != nil {
		return k, err
	}
	next := base
	for len(k.Event) < 3 {
		var key string
		if key, next, err = pick("sale:item-", (hot+1)%n, next); err != nil {
			return k, err
		}
		k.Event = append(k.Event, key)
		next++
	}
	return k, nil
}
