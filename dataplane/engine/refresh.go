package engine

import (
	"context"
	"time"
)

// Refresh ahead of expiry.
//
// A cached hot key would otherwise be read upstream again only once its
// entry has expired, and every reader arriving during that read waits one
// round trip (coalesced, but at every expiry). Instead, the first read that
// finds the entry in the last RefreshAheadPercent of its lifetime starts one
// coalesced upstream read in the background (the key's single flight, as a
// miss would) and returns the cached value; every reader keeps getting the
// cached value until the refreshed one replaces it. So:
//
//   - at most one early refetch per entry, hence per key per sidecar per
//     TTL: the read that claims it (cache.get) is the only one, and a
//     refetch that fails is not retried before expiry;
//   - only keys still read are refreshed: nothing runs on a timer, and an
//     entry nobody reads in its refresh window simply expires;
//   - a refresh is a fill like any other: it read the key's invalidation
//     number before its upstream read, so a write or tracking push that
//     arrives meanwhile makes the cache drop its reply (cache.put) and the
//     invalidated entry is not brought back.
//
// A deterministic point rather than XFetch's probabilistic one: XFetch lets
// independent processes sharing one cache entry avoid refreshing together
// without talking, at the price of a refresh time that depends on the read
// rate and a measured recompute time. Here each sidecar has its own entry
// and can claim the refresh with one compare-and-swap, so a fixed point is
// exact (one refetch, never zero while the key is read in the window) and
// the TTL jitter already spreads sidecars apart. See docs/engine.md.

// refreshAt is when reads of an entry filled at filled and expiring at
// expires start its early refresh: percent of its lifetime before expiry.
// Zero (never) when percent is not in (0, 100).
func refreshAt(filled, expires time.Time, percent int32) time.Time {
	if percent <= 0 || percent >= 100 || !filled.Before(expires) {
		return time.Time{}
	}
	life := expires.Sub(filled)
	return expires.Add(-life * time.Duration(percent) / 100)
}

// refresh starts the early refresh of p's key, claimed by a cache hit. It
// does not wait: the read runs in the background as the key's single
// flight, so a reader that misses meanwhile (the entry expired under a slow
// upstream) joins it instead of reading again. ctx's values are kept (the
// go-redis hook marks the engine's own commands in them), not its
// cancellation. Close waits for refreshes in flight.
func (e *Engine) refresh(ctx context.Context, p *plan) {
	e.bgMu.Lock()
	if e.bgClosed {
		e.bgMu.Unlock()
		return
	}
	e.bg.Add(1)
	e.bgMu.Unlock()
	e.m.refreshes.Inc()
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer e.bg.Done()
		_, _, _ = e.flight.Do(p.key, func() (any, error) { return e.fill(ctx, p, true) })
	}()
}

// waitRefreshes stops new refreshes and waits for those in flight, each
// bounded by Options.UpstreamTimeout.
func (e *Engine) waitRefreshes() {
	e.bgMu.Lock()
	e.bgClosed = true
	e.bgMu.Unlock()
	e.bg.Wait()
}
