package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/heatsink-dev/heatsink/controllers/decide"
	"github.com/heatsink-dev/heatsink/routing"
)

// refillBook remembers, per policy, the keys to fill once more when the
// table that replicates them has reached every sidecar. A fill copies the
// base into the replicas as the table is published; until the sidecars load
// it (within the margin), writes go through the old table to the base key
// only, so the replicas would serve a stale value until the next write or
// their TTL. The refill after the margin closes that gap: from then on
// every write updates the replicas too. It is memory only: a manager
// restart in that window loses the refill, and the replica TTL bounds the
// staleness then.
type refillBook struct {
	mu sync.Mutex
	m  map[types.NamespacedName]map[string]refillAt
}

type refillAt struct {
	at       time.Time
	replicas int
}

// filled records a fill of f; a first fill schedules its refill at at.
func (b *refillBook) filled(key types.NamespacedName, f decide.Fill, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.Refill {
		delete(b.m[key], f.Key)
		return
	}
	if b.m == nil {
		b.m = make(map[types.NamespacedName]map[string]refillAt)
	}
	if b.m[key] == nil {
		b.m[key] = make(map[string]refillAt)
	}
	b.m[key][f.Key] = refillAt{at: at, replicas: f.Replicas}
}

// due returns the keys whose refill is due, with their replica counts.
func (b *refillBook) due(key types.NamespacedName, now time.Time) map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for k, ra := range b.m[key] {
		if !now.Before(ra.at) {
			out[k] = ra.replicas
		}
	}
	return out
}

// drop forgets the refills of keys no longer replicated alike.
func (b *refillBook) drop(key types.NamespacedName, entries []routing.Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m[key]) == 0 {
		return
	}
	t := routing.Table{Entries: entries}
	for k, ra := range b.m[key] {
		if e := t.Lookup(k); e == nil || e.Replicate == nil || int(e.Replicate.Replicas) != ra.replicas {
			delete(b.m[key], k)
		}
	}
}

// next is the earliest pending refill of the policy (zero if none).
func (b *refillBook) next(key types.NamespacedName) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out time.Time
	for _, ra := range b.m[key] {
		out = earliest(out, ra.at)
	}
	return out
}

func (b *refillBook) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}
