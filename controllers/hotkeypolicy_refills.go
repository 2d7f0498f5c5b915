package controllers

import (
	"time"

	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// refills are a policy's keys to fill once more when the table that
// replicates them has reached every sidecar. A fill copies the base into
// the replicas as the table is published; until the sidecars load it
// (within the margin), writes go through the old table to the base key
// only, so the replicas would serve a stale value until the next write or
// their TTL. The refill after the margin closes that gap: from then on
// every write updates the replicas too. It is memory only (policyMemory): a
// manager restart in that window loses the refill, and the replica TTL
// bounds the staleness then.
type refills map[string]refillAt

type refillAt struct {
	at       time.Time
	replicas int
}

// filled records a fill of f; a first fill schedules its refill at at.
func (b *refills) filled(f decide.Fill, at time.Time) {
	if f.Refill {
		delete(*b, f.Key)
		return
	}
	if *b == nil {
		*b = make(refills)
	}
	(*b)[f.Key] = refillAt{at: at, replicas: f.Replicas}
}

// due returns the keys whose refill is due, with their replica counts.
func (b refills) due(now time.Time) map[string]int {
	out := map[string]int{}
	for k, ra := range b {
		if !now.Before(ra.at) {
			out[k] = ra.replicas
		}
	}
	return out
}

// drop forgets the refills of keys no longer replicated alike.
func (b refills) drop(entries []routing.Entry) {
	if len(b) == 0 {
		return
	}
	t := routing.Table{Entries: entries}
	for k, ra := range b {
		if e := t.Lookup(k); e == nil || e.Replicate == nil || int(e.Replicate.Replicas) != ra.replicas {
			delete(b, k)
		}
	}
}

// next is the earliest pending refill (zero if none).
func (b refills) next() time.Time {
	var out time.Time
	for _, ra := range b {
		out = earliest(out, ra.at)
	}
	return out
}
