package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/controllers/hub"
	"github.com/heatsink-dev/heatsink/demo/observe"
	"github.com/heatsink-dev/heatsink/routing"
)

// CalmResult is what the calm scenario measures (Config.Calm): that the
// manager counted the background through the real path (clients →
// sidecars → node agents → fleet server), decided on it all along, and
// mitigated none of it.
type CalmResult struct {
	// Mitigated are the keys a routing table listed as detected during the
	// run; OverThreshold those the manager saw over a threshold at some
	// point (the start of sustainFor), mitigated or not.
	Mitigated, OverThreshold []string
	// Passes are the manager's reconcile passes during traffic; each
	// decides on the fleet server's view once it is warm.
	Passes uint64
	// Hottest is the key with the highest counted rate in any second of
	// the fleet server's view, with its reads and writes per second then,
	// and whether every node counted it exactly (else an upper bound).
	Hottest                     string
	HottestReads, HottestWrites float64
	HottestExact                bool
	// CountedPerSecond is the mean, over the seconds of traffic, of the
	// policy's counted traffic (reads + writes per second, fresh nodes).
	CountedPerSecond float64
	// Seconds is how many views were read (one a second).
	Seconds int
}

// watch reads the fleet server's view of policy id once a second until ctx
// ends. (A read lets the next change of a key's band trigger a pass as the
// manager's own reads do: at most one more pass a second.)
func (c *CalmResult) watch(ctx context.Context, h *hub.Hub, id string) {
	if h == nil {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var sum float64
	for {
		select {
		case <-ctx.Done():
			if c.Seconds > 0 {
				c.CountedPerSecond = sum / float64(c.Seconds)
			}
			return
		case <-tick.C:
		}
		snap, _ := h.Snapshot(id)
		sum += snap.Total.Reads + snap.Total.Writes
		c.Seconds++
		for k, e := range snap.Estimates {
			v := e.Upper
			if e.Exact {
				v = e.Lower
			}
			if v.Reads+v.Writes > c.HottestReads+c.HottestWrites {
				c.Hottest, c.HottestReads, c.HottestWrites, c.HottestExact = k, v.Reads, v.Writes, e.Exact
			}
		}
	}
}

// fill takes the mitigated and over-threshold keys from the observer.
func (c *CalmResult) fill(snap observe.Snapshot) {
	c.Mitigated, c.OverThreshold = nil, nil
	for k, kt := range snap.Keys {
		if !kt.Routed.IsZero() && kt.Source == routing.SourceDetected {
			c.Mitigated = append(c.Mitigated, k)
		}
		if !kt.Detected.IsZero() {
			c.OverThreshold = append(c.OverThreshold, k)
		}
	}
	sort.Strings(c.Mitigated)
	sort.Strings(c.OverThreshold)
}

// reconcilePasses is the manager's reconcile count so far, from its
// private registry (0 if it cannot be read).
func reconcilePasses(reg *prometheus.Registry) uint64 {
	if reg == nil {
		return 0
	}
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "heatsink_manager_reconcile_duration_seconds" {
			for _, m := range mf.GetMetric() {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// printCalm prints the calm scenario's rows.
func printCalm(tw *tabwriter.Writer, cfg Config, r *Result) {
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	c := r.Calm
	row("scenario", fmt.Sprintf("calm: Zipf(1.1) over %d keys at %d ops/s (80 %% GET, 20 %% SET), no viral key, no event", cfg.BackgroundKeys, cfg.BackgroundRate))
	row("keys mitigated", fmt.Sprintf("%d%s", len(c.Mitigated), listed(c.Mitigated)))
	row("keys over a threshold (sustainFor started)", fmt.Sprintf("%d%s", len(c.OverThreshold), listed(c.OverThreshold)))
	row("manager reconcile passes", fmt.Sprintf("%d in %s of traffic", c.Passes, cfg.Duration))
	hottest := "no key listed by a node agent (agents list the keys near a threshold in force)"
	if c.Hottest != "" {
		exact := "upper bound"
		if c.HottestExact {
			exact = "exact"
		}
		hottest = fmt.Sprintf("hottest listed %s at %.0f reads/s, %.0f writes/s (%s)", c.Hottest, c.HottestReads, c.HottestWrites, exact)
	}
	row("counted by the manager", fmt.Sprintf("%.0f ops/s on average over %d views; %s", c.CountedPerSecond, c.Seconds, hottest))
}

// listed is ": a, b, c" for at most ten keys, "" for none.
func listed(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	if len(keys) > 10 {
		return ": " + strings.Join(keys[:10], ", ") + ", …"
	}
	return ": " + strings.Join(keys, ", ")
}
