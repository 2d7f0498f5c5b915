package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// agentStream is one node agent's event stream: encoded lines queued for the
// goroutine that writes them.
type agentStream struct {
	out  chan queued
	done chan struct{}
}

// queued is an encoded event waiting for an agent's stream.
type queued struct {
	line []byte
	// pushed is when SetRouting pushed this routing table; zero for other
	// events. The stream observes how long the line took to be flushed.
	pushed time.Time
}

// streamQueue bounds the events queued for one agent. An agent that falls
// this far behind is disconnected; it reconnects and gets a fresh snapshot,
// which is never larger than what it missed.
const streamQueue = 1024

func (h *Hub) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+agentlink.PathSummary, h.serveSummary)
	mux.HandleFunc("GET "+agentlink.PathWatch, h.serveWatch)
	return mux
}

// serveSummary takes one node's summary.
func (h *Hub) serveSummary(w http.ResponseWriter, r *http.Request) {
	if !agentlink.Authorized(r, h.opts.Token) {
		h.metrics.summaries.WithLabelValues("unauthorized").Inc()
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, agentlink.MaxSummaryBytes+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s, err := agentlink.UnmarshalSummary(body)
	if err != nil {
		h.metrics.summaries.WithLabelValues("malformed").Inc()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.Ingest(s)
	w.WriteHeader(http.StatusNoContent)
}

// Ingest takes a node's summary as if it had been posted (the server calls
// it; in-process tests may too). Policies the node does not host are
// ignored: a node speaks only for the pods the manager knows are on it.
func (h *Hub) Ingest(s *agentlink.Summary) {
	now := h.opts.Clock.Now()
	h.mu.RLock()
	type job struct {
		p  *policy
		ps *agentlink.PolicySummary
	}
	jobs := make([]job, 0, len(s.Policies))
	ignored := 0
	for i := range s.Policies {
		ps := &s.Policies[i]
		p := h.policies[ps.Policy]
		if p == nil || p.nodes[s.Node] == 0 {
			ignored++
			continue
		}
		jobs = append(jobs, job{p, ps})
	}
	h.mu.RUnlock()
	h.metrics.summaries.WithLabelValues("accepted").Inc()
	if ignored > 0 {
		h.metrics.policySummaries.WithLabelValues("ignored").Add(float64(ignored))
	}
	for _, j := range jobs {
		j.p.vmu.Lock()
		j.p.view.apply(now, s.Node, s.Session, s.Seq, j.ps)
		// A move whose path now fails by the rule, or under which
		// commands were refused, is withdrawn by a pass asked for now, not
		// at the pass's next scheduled check.
		changed := j.p.view.movesFailing(now, failedKeys(j.ps.Moved))
		changed = j.p.view.refusalsReported(now, j.ps.Refused) || changed
		changed = j.p.view.takeBandChange() || changed
		candidate := j.p.view.takeNewCandidate()
		j.p.vmu.Unlock()
		h.metrics.policySummaries.WithLabelValues("applied").Inc()
		if changed {
			h.trigger(j.p)
		}
		if candidate {
			h.repinSoon(j.p)
		}
	}
}

func (h *Hub) trigger(p *policy) {
	if h.onTrigger != nil && p.triggered.CompareAndSwap(false, true) {
		h.metrics.triggers.Inc()
		if !h.onTrigger(p.id) {
			p.triggered.Store(false) // the next band change tries again
		}
	}
}

// serveWatch holds a node agent's event stream: a snapshot of everything
// about its node, then changes as they happen, and heartbeats.
func (h *Hub) serveWatch(w http.ResponseWriter, r *http.Request) {
	if !agentlink.Authorized(r, h.opts.Token) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	nodeName := r.URL.Query().Get("node")
	if nodeName == "" || len(nodeName) > agentlink.MaxNodeLen {
		http.Error(w, "query parameter node is required", http.StatusBadRequest)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	st := &agentStream{out: make(chan queued, streamQueue), done: make(chan struct{})}
	h.attach(nodeName, st)
	defer h.detach(nodeName, st)
	w.Header().Set("Content-Type", "application/x-ndjson")
	// The summary version this manager reads, so that an agent of a later
	// release writes one it accepts (agentlink.ManagerSummaryVersion).
	w.Header().Set(agentlink.SummaryVersionHeader, strconv.Itoa(agentlink.SummaryVersion))
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	heartbeat := h.opts.Clock.NewTicker(agentlink.HeartbeatInterval)
	defer heartbeat.Stop()
	hb, _ := json.Marshal(agentlink.Event{Type: agentlink.TypeHeartbeat})
	hb = append(hb, '\n')
	var pushed []time.Time
	write := func(q queued) bool {
		pushed = pushed[:0]
		add := func(q queued) bool {
			if !q.pushed.IsZero() {
				pushed = append(pushed, q.pushed)
			}
			_, err := bw.Write(q.line)
			return err == nil
		}
		if !add(q) {
			return false
		}
		// Write what is queued together, then flush once.
		for more := true; more; {
			select {
			case q := <-st.out:
				if !add(q) {
					return false
				}
			default:
				more = false
			}
		}
		if bw.Flush() != nil {
			return false
		}
		flusher.Flush()
		for _, at := range pushed {
			h.metrics.routingPushSeconds.Observe(h.opts.Clock.Since(at).Seconds())
		}
		return true
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-st.done:
			return
		case q := <-st.out:
			if !write(q) {
				return
			}
		case <-heartbeat.C():
			if !write(queued{line: hb}) {
				return
			}
		}
	}
}

// attach registers a node's stream (replacing an older one) and queues its
// snapshot.
func (h *Hub) attach(nodeName string, st *agentStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.nodes[nodeName]
	if n == nil {
		n = &node{pods: map[string]agentlink.Pod{}}
		h.nodes[nodeName] = n
	}
	if n.stream != nil {
		close(n.stream.done)
	}
	h.setStream(n, st)
	h.metrics.connects.Inc()
	for _, p := range h.policies {
		if p.nodes[nodeName] > 0 {
			h.sendPolicy(nodeName, p)
		}
	}
	h.sendPods(nodeName)
	h.sendLine(nodeName, h.encode(agentlink.Event{Type: agentlink.TypeSynced}))
}

func (h *Hub) detach(nodeName string, st *agentStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.nodes[nodeName]
	if n == nil || n.stream != st {
		return
	}
	h.setStream(n, nil)
	if len(n.pods) == 0 {
		delete(h.nodes, nodeName)
	}
}

// setStream sets n's stream (nil: none) and keeps the count of connected
// nodes and its gauge; h.mu is held.
func (h *Hub) setStream(n *node, st *agentStream) {
	switch {
	case n.stream == nil && st != nil:
		h.connected++
	case n.stream != nil && st == nil:
		h.connected--
	}
	n.stream = st
	h.metrics.agents.Set(float64(h.connected))
}

// encode turns an event into a stream line.
func (h *Hub) encode(ev agentlink.Event) []byte {
	line, err := json.Marshal(ev)
	if err != nil {
		h.opts.Log.Error(err, "encoding fleet event")
		return nil
	}
	return append(line, '\n')
}

// sendLine queues an encoded event for a node's agent, if connected; h.mu
// must be held. An agent whose queue is full is disconnected (it reconnects
// and resyncs).
func (h *Hub) sendLine(nodeName string, line []byte) {
	h.queue(nodeName, queued{line: line})
}

// queue is sendLine for a queued event; h.mu held.
func (h *Hub) queue(nodeName string, q queued) {
	n := h.nodes[nodeName]
	if n == nil || n.stream == nil || q.line == nil {
		return
	}
	select {
	case n.stream.out <- q:
		h.metrics.events.Inc()
	default:
		h.metrics.streamDrops.Inc()
		close(n.stream.done)
		h.setStream(n, nil)
	}
}

func (h *Hub) closeStreams() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.nodes {
		if n.stream != nil {
			close(n.stream.done)
			h.setStream(n, nil)
		}
	}
}

// sweepLoop expires silent nodes, re-checks bands (upper bounds move when
// any node's Unseen does) and refreshes directives (pins) every Sweep, and
// chooses the pins of a policy again as soon as a key not pinned enters the
// warm or hot band (repinSoon).
func (h *Hub) sweepLoop(ctx context.Context) {
	t := h.opts.Clock.NewTicker(h.opts.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			h.sweep()
		case <-h.repinKick:
			h.repinWanted()
		}
	}
}

// repinSoon asks the sweep loop to choose p's pins again now: a key not
// pinned entered the warm or hot band. A key becomes hot only on its exact
// count, and its count is exact only once every node has the pin (and says
// so), so every moment the pin waits is added to the reaction: with pins
// chosen every pinEvery only, up to 250 ms.
func (h *Hub) repinSoon(p *policy) {
	p.repin.Store(true)
	select {
	case h.repinKick <- struct{}{}:
	default: // a kick is pending: it serves this policy too
	}
}

// repinWanted chooses the pins of the policies repinSoon asked for.
func (h *Hub) repinWanted() {
	now := h.opts.Clock.Now()
	h.mu.RLock()
	var items []sweepItem
	for _, p := range h.policies {
		if p.hasParams && p.repin.Swap(false) {
			items = append(items, sweepItem{p, p.params, p.mitigated})
		}
	}
	h.mu.RUnlock()
	for _, it := range items {
		maxAge := StaleAfterIntervals * it.params.ReportInterval
		it.p.vmu.Lock()
		pins := h.choosePins(it, now, maxAge)
		it.p.vmu.Unlock()
		h.applyPins(it.p, pins)
	}
}

// sweepItem is a policy as a sweep takes it.
type sweepItem struct {
	p         *policy
	params    Params
	mitigated []string
}

// choosePins chooses a policy's pins at now; p.vmu held.
func (h *Hub) choosePins(it sweepItem, now time.Time, maxAge time.Duration) []string {
	it.p.pinsAt = now
	snap := it.p.view.snapshot(now, maxAge, maxAge)
	return it.p.view.pinCandidates(&snap, it.mitigated, it.params.Thresholds, 2*int(max(it.params.TopK, 8)))
}

// applyPins pushes a policy's pins in its directive if they changed.
func (h *Hub) applyPins(p *policy, pins []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.policies[p.id] == p {
		h.refreshDirective(p, pins, false)
	}
}

// pinEvery is how often a policy's pins are chosen again: often enough
// that a key entering the warm band is pinned well within sustainFor, rarely
// enough that a thousand nodes' views are not snapshotted ten times a second.
const pinEvery = 250 * time.Millisecond

func (h *Hub) sweep() {
	now := h.opts.Clock.Now()
	h.mu.RLock()
	items := make([]sweepItem, 0, len(h.policies))
	for _, p := range h.policies {
		if p.hasParams {
			items = append(items, sweepItem{p, p.params, p.mitigated})
		}
	}
	h.mu.RUnlock()
	// Each policy under its own lock only: summaries of other policies go
	// on being applied meanwhile.
	for _, it := range items {
		p := it.p
		maxAge := StaleAfterIntervals * it.params.ReportInterval
		p.vmu.Lock()
		p.view.expire(now, maxAge)
		p.view.rebandAll(now)
		changed := p.view.takeBandChange()
		var pins []string
		// A key entering the band here (a bound moved with another node's
		// Unseen) is pinned now too, not at the next pinEvery.
		repin := now.Sub(p.pinsAt) >= pinEvery || p.view.takeNewCandidate()
		if repin {
			pins = h.choosePins(it, now, maxAge)
		}
		p.vmu.Unlock()
		if changed {
			h.trigger(p)
		}
		if repin {
			h.applyPins(p, pins)
		}
	}
}

// Status says whether a policy's view can be decided on.
type Status struct {
	// Warm: the hub has served for long enough (one and a half report
	// intervals) that every live node has sent a summary. A new leader's
	// views start empty; deciding on them would mistake "not heard yet"
	// for "cold".
	Warm bool
	// WarmAt is when the view becomes warm (if not yet).
	WarmAt time.Time
	// Serving: this manager runs the fleet server (it is the leader).
	Serving bool
}

// Snapshot returns a policy's cluster-wide view at now and re-arms its
// trigger.
func (h *Hub) Snapshot(id string) (Snapshot, Status) {
	now := h.opts.Clock.Now()
	h.mu.RLock()
	p := h.policies[id]
	since := h.leaderSince
	h.mu.RUnlock()
	st := Status{Serving: !since.IsZero()}
	if p == nil || !p.hasParams || since.IsZero() {
		return Snapshot{}, st
	}
	warmUp := h.opts.WarmUp
	if warmUp == 0 {
		warmUp = p.params.ReportInterval * 3 / 2
	}
	st.WarmAt = since.Add(max(warmUp, 0))
	st.Warm = !now.Before(st.WarmAt)
	p.triggered.Store(false)
	maxAge := StaleAfterIntervals * p.params.ReportInterval
	p.vmu.Lock()
	defer p.vmu.Unlock()
	if !st.Warm && p.view.heardFromAll(since) {
		// Every node hosting the policy's pods has reported to this
		// manager (agents send at once when they connect): nothing more
		// to wait for.
		st.Warm = true
	}
	snap := p.view.snapshot(now, maxAge, maxAge)
	return snap, st
}
