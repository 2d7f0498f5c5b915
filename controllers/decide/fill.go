package decide

import (
	"time"

	"github.com/heatsink-dev/heatsink/routing"
)

// Fill is one key whose replicas the manager fills from the base value.
type Fill struct {
	Key      string
	Replicas int
	TTL      time.Duration
	// Refill marks the second fill of a key, once the table that replicates
	// it has reached every sidecar; it is not repeated.
	Refill bool
}

// Fills lists the replica fills of one pass, in the order of entries (the
// table about to be published): keys whose replication is new or resized
// since current (the table published before; nil if none), keys pre-warming
// for a schedule (from its PrewarmAt until margin after its Start, so the
// replicas hold the value when the event starts and the table carrying them
// has reached every sidecar), and the refills in due of keys still
// replicated alike. due maps a key to the replica count its refill was
// booked for; a refill of a key replicated differently now is not done (its
// new replication is filled as a change instead, or it is gone).
func Fills(now time.Time, margin time.Duration, current *routing.Table, entries []routing.Entry, scheduled []ScheduledKey, due map[string]int) []Fill {
	prewarming := map[string]bool{}
	for _, sk := range scheduled {
		if !now.Before(sk.PrewarmAt) && !now.After(sk.Start.Add(margin)) {
			prewarming[sk.Key] = true
		}
	}
	var out []Fill
	for _, e := range entries {
		if e.Replicate == nil {
			continue
		}
		changed := true
		if current != nil {
			if pe := current.Lookup(e.Key); pe != nil && pe.Replicate != nil && *pe.Replicate == *e.Replicate {
				changed = false
			}
		}
		f := Fill{Key: e.Key, Replicas: int(e.Replicate.Replicas), TTL: time.Duration(e.Replicate.TTLMillis) * time.Millisecond}
		if n, booked := due[e.Key]; changed || prewarming[e.Key] {
			out = append(out, f)
		} else if booked && n == f.Replicas {
			f.Refill = true
			out = append(out, f)
		}
	}
	return out
}
