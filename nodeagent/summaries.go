package nodeagent

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/sketch"
	"github.com/heatsink-dev/heatsink/nodeagent/summary"
)

// summaryLoop sends the node's summary to the manager when it is due: each
// report interval, or at once when a key newly reaches its alert level
// (summary.Urgent), which each tick checks among the keys counted since the
// previous one (mayBeUrgent), or when a directive newly pinned a key (the
// manager's count of it is exact only once every node says it applied the
// pin: waiting for the interval cost up to one report interval of reaction),
// or when a key's commands fail on its move's path clearly more than the
// direct ones (summary.MoveUrgentWithRecent), or when a key's commands are
// newly refused because of its move (refusalsUrgent): the manager withdraws
// such a move at once, on the summary that shows it; both are checked as
// soon as the batch that makes it so is counted, not at the next tick.
// Sending happens on another goroutine, the latest summary replacing one
// not sent yet, so a slow manager never delays counting.
func (d *Agent) summaryLoop(ctx context.Context) {
	out := d.summaryOut
	go d.sendSummaries(ctx, out)
	if d.opts.ExternalTicks { // the caller ticks (Tick)
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.movesFailing:
				d.external.Lock()
				d.summarizeIfDue(&d.external.st, out)
				d.external.Unlock()
			}
		}
	}
	t := d.opts.Clock.NewTicker(d.opts.Tick)
	defer t.Stop()
	var st sendState
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			d.tick(&st, out)
		case <-d.movesFailing:
			// Not a tick (Stats.Ticks counts the ticker's): the summary
			// goes if it is urgent and a tick has passed since the last.
			d.summarizeIfDue(&st, out)
		}
	}
}

// Tick runs one turn of the summary loop now, for an agent made with
// Options.ExternalTicks (otherwise it does nothing: the agent ticks
// itself). The summary it may queue is sent once Run runs.
func (d *Agent) Tick() {
	if !d.opts.ExternalTicks {
		return
	}
	d.external.Lock()
	defer d.external.Unlock()
	d.tick(&d.external.st, d.summaryOut)
}

// sendState is what the summary loop keeps from tick to tick.
type sendState struct {
	sched summary.Schedule // when the last summary went
	seq   uint64
	buf   []byte
}

// tick is one turn of the summary loop: summarise, and queue the summary
// for sending if it is due.
func (d *Agent) tick(st *sendState, out chan []byte) {
	defer d.ticks.Add(1)
	d.summarizeIfDue(st, out)
}

// summarizeIfDue summarises, and queues the summary for sending if it is
// due.
func (d *Agent) summarizeIfDue(st *sendState, out chan []byte) {
	now := d.opts.Clock.Now()
	if d.up.takeFresh() {
		st.sched.Reset() // a (new) manager: tell it now
	}
	dirty := d.dirty.Swap(false)
	interval := d.reportInterval()
	if st.sched.Early(now, interval) {
		// Before the interval is up a summary goes only if urgent. Only
		// counts or a directive can make it so (see dirty), and only
		// through what they touched: nothing needs building otherwise.
		if (!dirty && !d.pinSummaryPending(now)) || !d.mayBeUrgent(now) {
			return
		}
	}
	d.summarized.Add(1)
	s, commit, urgent := d.summarize(now)
	if !st.sched.Due(now, interval, d.opts.Tick, urgent) || !d.up.connected() {
		return
	}
	st.seq++
	s.Seq = st.seq
	var err error
	if st.buf, err = agentlink.MarshalSummaryVersion(st.buf[:0], s, d.summaryVersionOrLatest()); err != nil {
		d.log.Error(err, "encoding summary")
		return
	}
	commit()
	st.sched.Sent(now)
	msg := bytes.Clone(st.buf)
	select {
	case out <- msg:
	default:
		select { // replace the unsent one: only the newest matters
		case <-out:
			d.metrics.summaries.WithLabelValues("superseded").Inc()
		default:
		}
		out <- msg
	}
}

// reportInterval is the shortest report interval of the policies (one
// second without any), as setReportIntervalLocked last worked it out: it
// changes only with directives, and every tick needs it.
func (d *Agent) reportInterval() time.Duration {
	return time.Duration(d.interval.Load())
}

// setReportIntervalLocked works out reportInterval again; d.mu is held for
// writing (directives change p.dir only under it).
func (d *Agent) setReportIntervalLocked() {
	interval, first := time.Second, true
	for _, p := range d.policies {
		iv := time.Duration(p.dir.ReportIntervalMillis) * time.Millisecond
		if iv > 0 && (first || iv < interval) {
			interval, first = iv, false
		}
	}
	d.interval.Store(int64(interval))
}

// summarize builds the node's summary at now. commit records what it listed
// as sent (call it only if it is).
func (d *Agent) summarize(now time.Time) (s *agentlink.Summary, commit func(), urgent bool) {
	policies := d.policyStates()
	s = &agentlink.Summary{Node: d.opts.NodeName, Session: d.session, Policies: make([]agentlink.PolicySummary, 0, len(policies))}
	commits := make([]func(), 0, len(policies))
	for _, p := range policies {
		p.mu.Lock()
		p.sk.Advance(now)
		p.sk.TakeUpdated(nil) // this summary looks at every key
		p.rescan = false
		p.items = p.sk.AppendItems(p.items[:0]) // Build orders what it lists
		items := p.items
		tr, tw := p.sk.Tracking()
		keys, unseen := summary.Build(items, p.dir.Floor, agentlink.Rates{Reads: tr, Writes: tw}, d.opts.MaxKeysPerSummary)
		check := p.send.Check(now, items, p.dir.Alert, p.sk.PinsCounted())
		urgent = urgent || check.Urgent
		interval := d.reportInterval()
		window := time.Duration(p.dir.WindowMillis) * time.Millisecond
		total := p.total.update(now, p.reads, p.writes, window)
		p.sizes.Advance(now)
		refused, sentRefused := p.takeRefused()
		moved, sentMoved := p.takeMoved()
		urgent = urgent || p.outcomesUrgent(now, p.interval(interval))
		s.Policies = append(s.Policies, agentlink.PolicySummary{
			Policy: p.id, Directive: check.Echo, Unseen: unseen, Total: total, Keys: keys,
			BigKeys: p.sizes.Append(nil), Refused: refused, Moved: moved,
		})
		p.sketchBytes.Set(float64(p.sk.Bytes()))
		p.sketchKeys.Set(float64(p.sk.Len()))
		p.mu.Unlock()
		commits = append(commits, func() {
			p.mu.Lock()
			p.send.Sent(check, keys, interval)
			sentRefused(now)
			sentMoved(now)
			p.mu.Unlock()
		})
	}
	return s, func() {
		for _, c := range commits {
			c()
		}
	}, urgent
}

// mayBeUrgent reports whether a summary built at now could be urgent
// (summary.Urgent), from what can have changed since the previous tick: the
// keys counted since (sketch.TakeUpdated) and new directives. A key's
// average rises only with counts, or by at most Slots/(Slots−1) when a slot
// leaves the window; a key that reaches its alert level that way alone was
// just under it for a whole window, not turning hot, and goes in the next
// summary due by the interval. Otherwise it may answer yes for a summary
// that will not be urgent, never no for one that would be; so a tick costs
// a look at the keys it counted, not a pass over every sketch.
func (d *Agent) mayBeUrgent(now time.Time) bool {
	may := false
	for _, p := range d.policyStates() {
		p.mu.Lock()
		p.sk.Advance(now)
		var alerting []sketch.Item
		complete := p.sk.TakeUpdated(func(it sketch.Item) {
			if summary.Alerting(&it, p.dir.Alert) {
				alerting = append(alerting, it)
			}
		})
		if p.rescan || !complete || p.send.MayBeUrgent(now, alerting, p.dir.Alert, p.sk.PinsCounted()) || p.outcomesUrgent(now, p.interval(d.reportInterval())) {
			may = true
		}
		p.mu.Unlock()
	}
	return may
}

// pinSummaryPending reports whether any policy has a summary for its pins
// to send (summary.Sender.Pending), which time alone may make due.
func (d *Agent) pinSummaryPending(now time.Time) bool {
	for _, p := range d.policyStates() {
		p.mu.Lock()
		due := p.send.Pending(now)
		p.mu.Unlock()
		if due {
			return true
		}
	}
	return false
}

// sendSummaries POSTs each summary to the manager the uplink is connected
// to. A failure is counted; the next summary is complete, so nothing is
// retried.
func (d *Agent) sendSummaries(ctx context.Context, in <-chan []byte) {
	for {
		var body []byte
		select {
		case <-ctx.Done():
			return
		case body = <-in:
		}
		base, token := d.up.manager()
		if base == "" {
			d.metrics.summaries.WithLabelValues("no_manager").Inc()
			continue
		}
		if err := d.post(ctx, base, token, body); err != nil {
			d.metrics.summaries.WithLabelValues("error").Inc()
			d.log.V(1).Info("summary not delivered", "err", err.Error())
			continue
		}
		d.summaries.Add(1)
		d.metrics.summaries.WithLabelValues("sent").Inc()
	}
}

func (d *Agent) post(ctx context.Context, base, token string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+agentlink.PathSummary, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", agentlink.ContentTypeSummary)
	agentlink.SetToken(req, token)
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("manager answered %s", resp.Status)
	}
	return nil
}

// totalRate smooths a policy's counted traffic into per-second rates.
type totalRate struct {
	at            time.Time
	reads, writes uint64
	rate          agentlink.Rates
}

// update takes the counters at now and returns the smoothed rates: an
// exponential average whose time constant is the window.
func (t *totalRate) update(now time.Time, reads, writes uint64, window time.Duration) agentlink.Rates {
	if t.at.IsZero() || !now.After(t.at) {
		if t.at.IsZero() {
			t.at, t.reads, t.writes = now, reads, writes
		}
		return t.rate
	}
	dt := now.Sub(t.at).Seconds()
	a := 1 - math.Exp(-dt/max(window.Seconds(), dt))
	t.rate.Reads += a * (float64(reads-t.reads)/dt - t.rate.Reads)
	t.rate.Writes += a * (float64(writes-t.writes)/dt - t.rate.Writes)
	t.at, t.reads, t.writes = now, reads, writes
	return t.rate
}
