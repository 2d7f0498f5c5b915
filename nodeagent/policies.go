package nodeagent

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/internal/keyfilter"
	"github.com/heatsink-dev/heatsink/nodeagent/bigkeys"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
	"github.com/heatsink-dev/heatsink/nodeagent/summary"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// policyState is what the agent keeps for one policy. mu guards the sketch
// (ingest and the summary loop both use it) and the directive.
type policyState struct {
	mu sync.Mutex

	id              string // "<namespace>/<name>"
	namespace, name string
	dir             agentlink.Directive
	filter          *keyfilter.Filter
	sk              *sketch.Sketch
	// sizes are the policy's largest keys by value size, whatever their
	// rates (see package bigkeys).
	sizes *bigkeys.Top
	// refused counts, per key, the commands the sidecars refused because
	// of the key's move since the last summary sent (at most
	// agentlink.MaxRefusedKeysPerPolicy keys): the manager rolls back a
	// move its clients' commands are refused under.
	refused map[string]*uint64
	// refusedSent is when each key's refusals last went in a summary, for
	// those sent within the last report interval (refusalsUrgent).
	refusedSent map[string]time.Time
	// moved are, per key, the outcomes of the commands its move served on
	// the sidecars since the last summary sent, with their baseline (at
	// most agentlink.MaxMovedKeysPerPolicy keys): the manager withdraws a
	// move whose path fails clearly more than direct traffic.
	moved map[string]agentlink.KeyMoved
	// movedSent are the outcomes of the summaries sent within the last
	// report interval, oldest first, each sorted by key: the manager's
	// shortest window judges them with those not sent yet
	// (summary.MoveUrgentWithRecent).
	movedSent []movedSent
	// send is what the summary loop keeps of the policy's summaries to
	// decide whether the next is urgent (the send rule: package summary).
	send summary.Sender
	// rescan says a directive changed the alert level or the pins since
	// the last summary, so any key may have become urgent (mayBeUrgent).
	rescan bool
	// counted reads and writes, and their smoothed rate (informational:
	// the manager shows a policy's traffic; decisions never use it).
	reads, writes uint64
	total         totalRate
	// items is the summary's buffer, kept from one summary to the next.
	items []sketch.Item
	// sketchBytes and sketchKeys are the policy's gauges, looked up once.
	sketchBytes, sketchKeys prometheus.Gauge
}

// movedSent is one summary's move outcomes, sorted by key, and when it was
// sent.
type movedSent struct {
	at   time.Time
	keys []agentlink.KeyMoved
}

// interval is the policy's report interval, or def when its directive
// says none.
func (p *policyState) interval(def time.Duration) time.Duration {
	if iv := time.Duration(p.dir.ReportIntervalMillis) * time.Millisecond; iv > 0 {
		return iv
	}
	return def
}

// nodeK is how many keys a node tracks per policy, at least: more than the
// policy's topK, because a key that is hot cluster-wide can rank low on any
// one node (a viral key spread over 1,000 nodes is a thousandth of its rate
// on each) and the manager's guarantee depends on nodes seeing it.
const nodeK = 256

// SketchConfig derives a policy's sketch configuration from its directive.
// Writes are weighed against reads by the ratio of their thresholds, so that
// a key at its write threshold ranks like one at its read threshold.
func SketchConfig(dir *agentlink.Directive, memory int) sketch.Config {
	r, w := dir.ReadsPerSecond, dir.WritesPerSecond
	rw, ww := uint32(1), uint32(1)
	if r > w {
		ww = uint32(min(max(r/max(w, 1), 1), 1000))
	} else if w > r {
		rw = uint32(min(max(w/max(r, 1), 1), 1000))
	}
	window := time.Duration(dir.WindowMillis) * time.Millisecond
	interval := time.Duration(dir.ReportIntervalMillis) * time.Millisecond
	slots := 10
	if interval > 0 {
		slots = min(max(int(window/interval), 2), 60)
	}
	k := max(int(dir.TopK), nodeK)
	return sketch.Config{
		K:           k,
		MemoryBytes: max(memory, sketchMinBytes(k, slots)),
		Window:      window,
		Slots:       slots,
		ReadWeight:  rw,
		WriteWeight: ww,
		// A key's first batch carries a flush period of traffic, and one
		// flush period is the shortest span a rate can honestly be measured
		// over: with both, a key's rate is right from its first batch, so the
		// first summary that lists a hot key already says how hot it is.
		Lead:    sidecarlink.FlushInterval,
		MinSpan: sidecarlink.FlushInterval,
	}
}

// sketchMinBytes is enough memory for a store of 1.5 K keys plus a filter.
func sketchMinBytes(k, slots int) int {
	return k*3/2*(160+12*slots)*3/2 + 16<<10
}

// withDefaults is cfg as the sketch fills it, for comparison with Config().
func withDefaults(cfg sketch.Config) sketch.Config {
	c, _ := cfg.Defaulted()
	return c
}

// applyDirective creates or updates a policy from the manager's directive.
// A new window, size or weighting needs a new sketch (counts restart);
// floors, pins and key globs change in place.
func (d *Agent) applyDirective(dir *agentlink.Directive) error {
	ns, name, ok := strings.Cut(dir.Policy, "/")
	if !ok || ns == "" || name == "" || dir.WindowMillis <= 0 {
		return fmt.Errorf("directive for %q: malformed", dir.Policy)
	}
	filter, err := keyfilter.Compile(dir.Include, dir.Exclude)
	if err != nil {
		return fmt.Errorf("directive for %s: %w", dir.Policy, err)
	}
	cfg := SketchConfig(dir, d.opts.MemoryPerPolicy)
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.policies[dir.Policy]
	var sk *sketch.Sketch
	if p == nil || p.sk.Config() != withDefaults(cfg) {
		if sk, err = sketch.New(cfg); err != nil {
			return fmt.Errorf("directive for %s: %w", dir.Policy, err)
		}
	}
	if p == nil {
		p = &policyState{id: dir.Policy, namespace: ns, name: name,
			sizes:       bigkeys.New(d.opts.BigKeys, d.opts.BigKeyWindow),
			sketchBytes: d.metrics.sketchBytes.WithLabelValues(ns, name),
			sketchKeys:  d.metrics.sketchKeys.WithLabelValues(ns, name)}
		d.policies[dir.Policy] = p
		d.metrics.policies.Set(float64(len(d.policies)))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := d.opts.Clock.Now()
	if sk != nil {
		sk.Advance(now)
		p.sk = sk
	}
	p.dir, p.filter = *dir, filter
	d.setReportIntervalLocked()
	if refused := p.send.Pins(p.sk, dir.Pins, dir.Version, now); refused > 0 {
		d.metrics.pinsRefused.Add(float64(refused))
	}
	p.rescan = true
	d.dirty.Store(true) // a new alert level or new pins may make a summary urgent
	return nil
}

// removePolicy forgets a policy the manager no longer sends.
func (d *Agent) removePolicy(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.policies[id]; ok {
		delete(d.policies, id)
		d.setReportIntervalLocked()
		d.metrics.forget(id)
		d.metrics.policies.Set(float64(len(d.policies)))
	}
}

// policyIDs lists the policies the agent tracks.
func (d *Agent) policyIDs() []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]string, 0, len(d.policies))
	for id := range d.policies {
		out = append(out, id)
	}
	return out
}

// policyStates lists the policies the agent tracks.
func (d *Agent) policyStates() []*policyState {
	d.mu.RLock()
	defer d.mu.RUnlock()
	ps := make([]*policyState, 0, len(d.policies))
	for _, p := range d.policies {
		ps = append(ps, p)
	}
	return ps
}
