package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
)

// printSummary prints the end-of-run table.
func printSummary(out io.Writer, cfg Config, r *Result) {
	title := "heatsink demo: summary"
	if cfg.Live {
		title = "\x1b[1m" + title + "\x1b[0m"
	}
	fmt.Fprintf(out, "\n%s (%s of traffic, seed %d)\n\n", title, cfg.Duration, cfg.Seed)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	switch {
	case cfg.Calm:
		printCalm(tw, cfg, r)
	case cfg.ReplicaReads:
		printReplicaReads(tw, cfg, r)
	default:
		printScenario(tw, cfg, r)
	}
	var errs int64
	for _, n := range r.Counts.Errors {
		errs += n
	}
	if errs > 0 {
		row("client errors", fmt.Sprintf("%d (last: %s)", errs, r.Counts.LastError))
	} else {
		row("client errors", "0")
	}
	row("thresholds", thresholdsText(cfg))
	for _, sh := range r.Shards {
		if sh.Replica {
			continue
		}
		row("  master "+sh.Address, shardText(sh))
	}
	_ = tw.Flush()
	for _, u := range r.Unavailable {
		fmt.Fprintf(out, "\n  ! stage NOT AVAILABLE in this build: %s", u)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(out, "\n  ! %v", f)
	}
	if r.Chart != "" {
		fmt.Fprintf(out, "\n  chart of ops/s per master: %s\n", r.Chart)
	}
	if r.Policy != "" {
		fmt.Fprintf(out, "  the HotKeyPolicy applied: %s\n", r.Policy)
	}
	fmt.Fprintf(out, "  components' log: %s\n", r.Log)
}

// printScenario prints the rows of the viral keys' and the event's story.
func printScenario(tw *tabwriter.Writer, cfg Config, r *Result) {
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	ratio := ratioText
	row("busiest master ÷ mean, before relief", fmt.Sprintf("%s (peak %s)", ratio(r.RatioBefore), ratio(r.RatioPeak)))
	row("busiest master ÷ mean, after relief", ratio(r.RatioAfter))
	if e := r.Engine; e.Saved()+e.UpstreamReads > 0 {
		row("upstream reads saved", fmt.Sprintf("%.0f reads of mitigated keys never reached Redis (%.0f cache hits, %.0f coalesced; %.0f went upstream)",
			e.Saved(), e.CacheHits, e.Coalesced, e.UpstreamReads))
		row("cache refreshed ahead of expiry", fmt.Sprintf("%.0f early refreshes; %.0f reads of cached keys missed and waited for Redis",
			e.Refreshes, e.CacheMisses))
	}
	if r.ClientReads > 0 {
		row("GETs: clients → Redis", fmt.Sprintf("%d sent through the sidecars, %d GET/MGET served by the masters (background, split sums and counter refreshes included)",
			r.ClientReads, r.UpstreamReads))
	}
	for _, m := range []struct {
		what string
		mo   Moments
		rate int
	}{{"viral read", r.ViralRead, cfg.ViralReadRate}, {"viral counter", r.Counter, cfg.ViralWriteRate}} {
		if m.rate == 0 {
			continue // not driven in this run
		}
		d := m.mo.DetectionToRouting()
		pipeline := ""
		if d > 0 {
			pipeline = fmt.Sprintf(" (sustainFor %s + %s)", dur(cfg.SustainFor), dur(max(d-cfg.SustainFor, 0)))
		}
		row(fmt.Sprintf("%s %s: detection → routing", m.what, m.mo.Key), dur(d)+pipeline)
		row(fmt.Sprintf("%s %s: spike → routed / relief", m.what, m.mo.Key), dur(m.mo.SpikeToRouted())+" / "+dur(m.mo.SpikeToRelief()))
		if t := m.mo.InForce; t != nil {
			row(fmt.Sprintf("%s %s: in force when routed", m.what, m.mo.Key), fmt.Sprintf("%d reads/s (%s), %d writes/s (%s) on its master",
				t.ReadsPerSecond, t.ReadsFrom, t.WritesPerSecond, t.WritesFrom))
		}
	}
	switch {
	case r.CounterErr != nil:
		row("counter exactness", "could not read the counter: "+r.CounterErr.Error())
	case r.CounterValue == r.CounterAcked:
		row("counter exactness", fmt.Sprintf("EXACT: %s = %d = acknowledged INCRs (read through a proxy: base + shards)", r.Keys.Counter, r.CounterValue))
	default:
		row("counter exactness", fmt.Sprintf("MISMATCH: %s = %d, acknowledged INCRs %d", r.Keys.Counter, r.CounterValue, r.CounterAcked))
	}
	if lead, ok := r.EventLead(); ok {
		verdict := "before"
		if lead <= 0 {
			verdict = "AFTER"
		}
		row("scheduled flash sale keys published", fmt.Sprintf("%s %s its start (%s)", dur(abs(lead)), verdict, strings.Join(r.Keys.Event, ", ")))
	} else {
		row("scheduled flash sale keys published", "not all of them")
	}
}

// thresholdsText says what the policy typed.
func thresholdsText(cfg Config) string {
	held := ""
	if cfg.ShardCPU > 0 {
		held = fmt.Sprintf("; every Redis node held to %s CPU", cfg.shardCPU())
	}
	if a := cfg.Auto; a != nil {
		if cfg.ShardCPU > 0 {
			held += " (thresholds.auto.shardCPU says so)"
		}
		return fmt.Sprintf("auto: no rate typed (keySharePercent %d, targetUtilizationPercent %d); learned capacity trusted from %.2g CPU-seconds of load%s",
			a.KeySharePercent, a.TargetUtilizationPercent, a.ConfidenceCPU/2, held)
	}
	return fmt.Sprintf("typed: %d reads/s, %d writes/s%s", cfg.ReadsPerSecond, cfg.WritesPerSecond, held)
}

// shardText is one master's learned capacity and the thresholds in force
// on it at the end of the run, from the policy's status.
func shardText(sh v1alpha1.ShardStatus) string {
	s := fmt.Sprintf("%d%% busy, capacity %d ops/s (confidence %d%%)", sh.UtilizationPercent, sh.CapacityOpsPerSecond, sh.ConfidencePercent)
	if t := sh.Thresholds; t != nil {
		s += fmt.Sprintf("; in force %d reads/s (%s), %d writes/s (%s)", t.ReadsPerSecond, t.ReadsFrom, t.WritesPerSecond, t.WritesFrom)
		if t.OverTarget {
			s += fmt.Sprintf("; over target: keys from %d ops/s hot", t.ShardRuleFloorPerSecond)
		}
	}
	return s
}

func dur(d time.Duration) string {
	if d < 0 {
		return "did not happen"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// ratioText prints a busiest ÷ mean ratio; 0 means it was not measured.
func ratioText(x float64) string {
	if x == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", x)
}
