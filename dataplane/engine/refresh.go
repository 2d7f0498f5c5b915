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
// finds the entry in its refresh window (the last stretch of its lifetime)
// starts one coalesced upstream read in the background (the key's single
// flight, as a miss would) and returns the cached value; every reader keeps
// getting the cached value until the refreshed one replaces it. So:
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
// The window is what it costs: a refreshed value is served for one TTL from
// its fetch (the staleness bound), so a refresh started a window w before
// expiry makes one upstream read per TTL − w, TTL/(TTL − w) reads per TTL.
// A fixed fraction of the TTL (10 % made 1.1) is mostly waste for a key
// read thousands of times a second. The window only has to hold what a
// refresh needs: a read that claims it, then its upstream read, until the
// refreshed value is stored. So each key's window follows what its
// refreshes needed (from the window's opening to the value stored; an
// entry that expired unrefreshed counts from its opening to the miss's
// fill after it): it starts at refreshAheadPercent of the lifetime (the
// ceiling), is set to twice the first need measured, then grows by 30 %
// after each refresh that needed more than it and shrinks by 3 % after each
// that needed less, between minRefreshWindow and the ceiling. That settles
// where about one refresh in ten needs more than the window (ln 1.3 ≈
// 9 × −ln 0.97): the window tracks the 90th percentile of the need, and a
// late refresh makes wait only the readers of the rest of its round trip,
// coalesced, far fewer than 1 % of a hot key's reads. A step is a factor,
// so one stall of the machine moves the window by 30 %, not to the stall's
// length; a key read seldom (long gaps before the first read in its
// window) or a slow upstream keeps a wide window, up to the ceiling.
//
// A deterministic point rather than XFetch's probabilistic one: XFetch lets
// independent processes sharing one cache entry avoid refreshing together
// without talking, at the price of a refresh time that depends on the read
// rate and a measured recompute time. Here each sidecar has its own entry
// and can claim the refresh with one compare-and-swap, so a fixed point is
// exact (one refetch, never zero while the key is read in the window) and
// the TTL jitter already spreads sidecars apart. See docs/engine.md.

const (
	// minRefreshWindow is the narrowest window: under it the margin is
	// within one scheduling delay of a loaded machine, too little for a
	// refresh to land before expiry. It costs 1 % of a 100 ms TTL, 0.05 %
	// of the default 2 s.
	minRefreshWindow = time.Millisecond
	// refreshGrow and refreshShrink are the window's steps, in percent,
	// after a refresh that needed more than it and one that did not.
	refreshGrow, refreshShrink = 30, 3
)

// refreshTiming is what one key's refreshes measured: the window its next
// entries get. The zero value knows nothing (the ceiling).
type refreshTiming struct {
	window time.Duration
	known  bool
}

// observe adds one refresh's need (from its window's opening to its value
// stored), within [minRefreshWindow, ceiling].
func (t refreshTiming) observe(need, ceiling time.Duration) refreshTiming {
	switch {
	case !t.known:
		t.window, t.known = 2*need, true
	case need > t.window:
		t.window += t.window * refreshGrow / 100
	default:
		t.window -= t.window * refreshShrink / 100
	}
	t.window = min(max(t.window, minRefreshWindow), max(ceiling, minRefreshWindow))
	return t
}

// refreshWindow is how long before expiry reads of an entry start its
// early refresh: the key's measured window, at most ceiling (and ceiling
// itself until a refresh has been measured).
func refreshWindow(t refreshTiming, ceiling time.Duration) time.Duration {
	if !t.known {
		return ceiling
	}
	return min(t.window, ceiling)
}

// refreshCeiling is the widest refresh window of an entry filled at filled
// and expiring at expires: percent of its lifetime. Zero (never refresh)
// when percent is not in (0, 100).
func refreshCeiling(filled, expires time.Time, percent int32) time.Duration {
	if percent <= 0 || percent >= 100 || !filled.Before(expires) {
		return 0
	}
	return expires.Sub(filled) * time.Duration(percent) / 100
}

// refreshAt is when reads of an entry expiring at expires start its early
// refresh: refreshWindow before expiry. Zero (never) when ceiling is not
// positive.
func refreshAt(expires time.Time, ceiling time.Duration, t refreshTiming) time.Time {
	if ceiling <= 0 {
		return time.Time{}
	}
	return expires.Add(-refreshWindow(t, ceiling))
}

// refresh starts the early refresh of p's key, claimed by a cache hit at
// claimed. It does not wait: the read runs in the background as the key's
// single flight, so a reader that misses meanwhile (the entry expired under
// a slow upstream) joins it instead of reading again. ctx's values are kept
// (the go-redis hook marks the engine's own commands in them), not its
// cancellation. Close waits for refreshes in flight.
func (e *Engine) refresh(ctx context.Context, p *plan, claimed time.Time) {
	e.background(ctx, func(ctx context.Context) {
		_, _, _ = e.flight.Do(p.key, func() (any, error) { return e.fill(ctx, p, claimed) })
	})
}

// background runs one early refresh, counted, unless Close is waiting.
func (e *Engine) background(ctx context.Context, run func(ctx context.Context)) {
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
		run(ctx)
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
