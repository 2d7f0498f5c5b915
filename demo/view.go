package demo

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/heatsink-dev/heatsink/demo/observe"
	"github.com/heatsink-dev/heatsink/routing"
)

// view draws the live terminal view: a full-screen redraw each second on a
// terminal, one line per second otherwise.
type view struct {
	cfg               Config
	out               io.Writer
	keys              Keys
	masters           []string
	start, eventStart time.Time
	lastOps           int64
	lastAt            time.Time
}

const barWidth = 40

func (v *view) draw(samples []observe.Sample, snap observe.Snapshot, c Counts) {
	now := time.Now()
	var total int64
	for _, n := range c.Ops {
		total += n
	}
	rate := 0.0
	if !v.lastAt.IsZero() {
		rate = float64(total-v.lastOps) / now.Sub(v.lastAt).Seconds()
	}
	v.lastOps, v.lastAt = total, now
	var errs int64
	for _, n := range c.Errors {
		errs += n
	}
	var last observe.Sample
	if len(samples) > 0 {
		last = samples[len(samples)-1]
	}
	if !v.cfg.Live {
		v.line(now, last, snap, rate, errs)
		return
	}
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	el := now.Sub(v.start).Truncate(time.Second)
	fmt.Fprintf(&b, "\x1b[1mheatsink demo\x1b[0m  t=%s / %s   epoch %d   routing v%d   counts from %d node(s)\n\n",
		el, v.cfg.Duration, snap.Status.Epoch, tableVersion(snap.Table), snap.Nodes)
	fmt.Fprintf(&b, "\x1b[1mRedis masters\x1b[0m (ops/s measured by Redis: INFO total_commands_processed)\n")
	top := 1.0
	for _, x := range last.OpsPerSec {
		top = max(top, x)
	}
	scale := max(top, float64(v.cfg.BackgroundRate+v.cfg.ViralReadRate+v.cfg.ViralWriteRate)/2)
	for i, addr := range v.masters {
		x := 0.0
		if i < len(last.OpsPerSec) {
			x = last.OpsPerSec[i]
		}
		n := int(x / scale * barWidth)
		n = min(max(n, 0), barWidth)
		color := "32"
		if x > 1.5*mean(last.OpsPerSec) {
			color = "31"
		}
		note := ""
		if i == v.keys.HotMaster {
			note = "  ← holds the viral keys"
		}
		fmt.Fprintf(&b, "  master %d %-16s \x1b[%sm%s\x1b[0m%s %7.0f%s\n", i+1, addr, color,
			strings.Repeat("█", n), strings.Repeat(" ", barWidth-n), x, note)
	}
	fmt.Fprintf(&b, "  busiest ÷ mean: %.2f\n\n", last.Ratio())

	fmt.Fprintf(&b, "\x1b[1mHot keys\x1b[0m (routing table %s-routing)\n", PolicyName)
	fmt.Fprintf(&b, "  %-22s %-10s %-28s %-18s %s\n", "KEY", "SOURCE", "MITIGATION", "SPIKE→ROUTED", "SPIKE→RELIEF")
	rows := 0
	if snap.Table != nil {
		for _, e := range snap.Table.Entries {
			spike, ok := v.spikeOf(e.Key)
			kt := snap.Keys[e.Key]
			routed, relief := "", ""
			switch {
			case e.Source == routing.SourceScheduled:
				routed = fmt.Sprintf("%s before start", v.eventStart.Sub(kt.Routed).Truncate(100*time.Millisecond))
			case ok && !kt.Routed.IsZero():
				routed = fmt.Sprintf("%.1fs", kt.Routed.Sub(spike).Seconds())
				rel := reliefOf(kt)
				if now.Before(rel) {
					relief = fmt.Sprintf("at epoch in %.1fs", rel.Sub(now).Seconds())
				} else {
					relief = fmt.Sprintf("%.1fs", rel.Sub(spike).Seconds())
				}
			}
			fmt.Fprintf(&b, "  %-22s %-10s %-28s %-18s %s\n", trim(e.Key, 22), e.Source, mitigations(e), routed, relief)
			rows++
		}
	}
	if rows == 0 {
		b.WriteString("  (none yet)\n")
	}
	fmt.Fprintf(&b, "\n\x1b[1mWorkload\x1b[0m %7.0f ops/s acknowledged through 4 proxies, %d errors", rate, errs)
	if c.LastError != "" {
		fmt.Fprintf(&b, " (last: %s)", trim(c.LastError, 60))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  viral read %s from t=%s, viral counter %s from t=%s, flash sale from t=%s\n",
		v.keys.ViralRead, v.cfg.ViralReadAt, v.keys.Counter, v.cfg.ViralWriteAt, v.cfg.EventStart)
	_, _ = io.WriteString(v.out, b.String())
}

// line prints one line per second for logs and tests.
func (v *view) line(now time.Time, last observe.Sample, snap observe.Snapshot, rate float64, errs int64) {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%3.0fs ops/s per master:", now.Sub(v.start).Seconds())
	for _, x := range last.OpsPerSec {
		fmt.Fprintf(&b, " %6.0f", x)
	}
	fmt.Fprintf(&b, "  busiest÷mean %.2f  workload %6.0f ops/s  errors %d  routing v%d:", last.Ratio(), rate, errs, tableVersion(snap.Table))
	if snap.Table != nil {
		for _, e := range snap.Table.Entries {
			fmt.Fprintf(&b, " %s[%s]", e.Key, mitigations(e))
		}
	}
	b.WriteString("\n")
	_, _ = io.WriteString(v.out, b.String())
}

func (v *view) spikeOf(key string) (time.Time, bool) {
	switch key {
	case v.keys.ViralRead:
		return v.start.Add(v.cfg.ViralReadAt), true
	case v.keys.Counter:
		return v.start.Add(v.cfg.ViralWriteAt), true
	}
	return time.Time{}, false
}

// reliefOf is when a routed key's mitigation takes effect (see Moments).
func reliefOf(kt observe.KeyTimes) time.Time {
	if kt.SplitEffective.After(kt.Routed) {
		return kt.SplitEffective
	}
	return kt.Routed
}

// mitigations names an entry's mitigations, cheapest first.
func mitigations(e routing.Entry) string {
	var m []string
	if e.Coalesce {
		m = append(m, "coalesce")
	}
	if e.LocalCache != nil {
		m = append(m, "cache")
		if e.LocalCache.RefreshAheadPercent > 0 {
			m = append(m, "refresh-ahead")
		}
	}
	if e.ReplicaReads != nil {
		m = append(m, "replica-reads")
	}
	if e.Replicate != nil {
		m = append(m, fmt.Sprintf("replicas=%d", e.Replicate.Replicas))
	}
	if e.Split != nil {
		var gs []string
		for _, g := range e.Split.Generations {
			gs = append(gs, fmt.Sprint(g.Shards))
		}
		m = append(m, "shards="+strings.Join(gs, "→"))
	}
	if e.PreAggregate != nil {
		m = append(m, "pre-aggregate")
	}
	return strings.Join(m, ",")
}

func tableVersion(t *routing.Table) int64 {
	if t == nil {
		return 0
	}
	return t.Version
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
