// Package hub is the manager's side of the fleet stream (its contract is
// agentlink): the server the node agents talk to, and the cluster-wide view
// of each policy's traffic that the HotKeyPolicy reconciler decides on.
//
// It runs only on the elected manager (a leader-election runnable): node
// agents try every manager address and stay with the one that answers. For
// each policy it keeps a view of every node's last summary (view), sets the
// floor and the pins every node applies (Floor, pinCandidates), knows which
// pods of which node may send counts for which policy (the pods the injector
// labelled), pushes routing tables to the nodes that host the policy's pods,
// and asks for a reconcile when a key's estimate crosses a band, so reaction
// does not wait for a periodic pass.
//
// Traffic to the API server: none. The hub is fed by the reconciler (policy
// parameters, published tables) and by the manager's cache (pods); node
// agents never call the API server.
package hub

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/heatsink-dev/heatsink/agentlink"
)

// Options configure a Hub.
type Options struct {
	// Addr is the listen address of the fleet server (":9444").
	Addr string
	// Token authenticates node agents (shared through a Secret). Required.
	Token string
	// TLS, if set, serves the fleet over TLS.
	TLS *tls.Config
	// Clock is the time of every freshness and warm-up decision.
	Clock clock.WithTicker
	// FloorFraction overrides DefaultFloorFraction.
	FloorFraction float64
	// Sweep is how often views are expired, bands re-checked and
	// directives (floors, pins) recomputed. Default 100ms.
	Sweep time.Duration
	// WarmUp is how long after it starts serving the hub's views are not
	// decided on (Status.Warm): long enough for every live node to send a
	// summary. Zero means one and a half report intervals; negative none
	// (tests of the reconcile pass itself).
	WarmUp time.Duration
	// Registerer receives the hub's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Log        logr.Logger
}

// StaleAfterIntervals is how many report intervals a node may stay silent
// before its counts stop counting. Agents send every interval whatever
// happens (an empty summary is a heartbeat), and the manager dates each
// summary by its own clock on arrival, so a live agent is never stale. Five,
// not fewer: an agent's post may time out (2 s) when its node or the manager
// is busy, and the next comes an interval later; with 3 intervals, two
// such posts in a row made a live node stale and Degraded flap (found with
// the fleet simulator at 1,000 nodes × 10 policies). A dead node's last
// counts linger that long, which the cooldown dwarfs.
const StaleAfterIntervals = 5

// Hub is the manager's fleet server and cluster-wide view.
type Hub struct {
	opts    Options
	metrics *metrics

	mu       sync.RWMutex
	policies map[string]*policy
	pods     map[string]agentlink.Pod // by "<namespace>/<name>" of the pod
	podNode  map[string]string        // pod → node
	nodes    map[string]*node
	// connected counts the nodes with a stream (setStream), so that an
	// agent's (re)connection costs the same at any fleet size: counting
	// them on each, under mu, made a reconnection storm at 5,000 nodes
	// quadratic, every attach waiting for the others' passes.
	connected int
	// leaderSince is when this hub started serving; zero before. Views are
	// warm one report interval (and a half) later.
	leaderSince time.Time
	version     uint64 // directive versions, see nextVersion

	addr     atomic.Pointer[string]
	addrOnce chan struct{}

	// repinKick wakes the sweep loop for repinSoon.
	repinKick chan struct{}

	onTrigger func(policy string) bool
	onPrime   func(context.Context) error

	// uninjected are the pods without the sidecar (uninjected.go).
	uninjected uninjected
}

// OnTrigger sets what asks for a reconcile of policy "<namespace>/<name>"
// soon. It must not block, and returns whether it could deliver the
// request; after a delivered one it is not called again for the policy
// until the next Snapshot of it. Set it before Start.
func (h *Hub) OnTrigger(f func(policy string) (delivered bool)) { h.onTrigger = f }

// OnPrime sets what Start runs before it serves: it must give the hub
// every policy and published table (SetPolicy, SetRouting), because a node
// agent forgets the policies its first snapshot does not name. Set it
// before Start.
func (h *Hub) OnPrime(f func(context.Context) error) { h.onPrime = f }

type policy struct {
	id        string
	params    Params
	hasParams bool
	// nodes counts this policy's pods per node.
	nodes   map[string]int
	dir     agentlink.Directive
	routing *agentlink.Routing
	// dirLine and routingLine are dir and routing as stream lines, encoded
	// once: sent to every node hosting the policy's pods.
	dirLine, routingLine []byte
	// pinsAt is when the sweep last chose the pins.
	pinsAt time.Time
	// mitigated are the keys of the published table (pinned: their cooling
	// must be measured exactly).
	mitigated []string

	vmu       sync.Mutex // guards view and bands
	view      *view
	triggered atomic.Bool
	// repin asks the sweep loop to choose the pins now (repinSoon).
	repin atomic.Bool
}

type node struct {
	pods   map[string]agentlink.Pod // by pod name
	stream *agentStream
}

// New validates opts.
func New(opts Options) (*Hub, error) {
	if opts.Token == "" {
		return nil, errors.New("hub: Token is required")
	}
	if opts.Addr == "" {
		opts.Addr = ":9444"
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.FloorFraction <= 0 || opts.FloorFraction >= 1 {
		opts.FloorFraction = DefaultFloorFraction
	}
	if opts.Sweep <= 0 {
		opts.Sweep = 100 * time.Millisecond
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Hub{
		opts: opts, metrics: m,
		policies: map[string]*policy{}, pods: map[string]agentlink.Pod{}, podNode: map[string]string{}, nodes: map[string]*node{},
		// Versions start at the wall clock, so a new leader's directives
		// are newer than any its predecessor sent (see view.minDirective).
		version:   uint64(opts.Clock.Now().UnixNano()),
		addrOnce:  make(chan struct{}),
		repinKick: make(chan struct{}, 1),
	}, nil
}

// NeedLeaderElection: only the elected manager serves the fleet.
func (h *Hub) NeedLeaderElection() bool { return true }

// Addr waits until the server listens and returns its address.
func (h *Hub) Addr(ctx context.Context) (string, error) {
	select {
	case <-h.addrOnce:
		return *h.addr.Load(), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Start serves the fleet until ctx ends (a manager.Runnable).
func (h *Hub) Start(ctx context.Context) error {
	if h.onPrime != nil {
		if err := h.onPrime(ctx); err != nil {
			return fmt.Errorf("hub: prime: %w", err)
		}
	}
	ln, err := net.Listen("tcp", h.opts.Addr)
	if err != nil {
		return err
	}
	if h.opts.TLS != nil {
		ln = tls.NewListener(ln, h.opts.TLS)
	}
	a := ln.Addr().String()
	h.addr.Store(&a)
	close(h.addrOnce)
	h.mu.Lock()
	h.leaderSince = h.opts.Clock.Now()
	h.mu.Unlock()
	srv := &http.Server{Handler: h.handler(), ReadHeaderTimeout: 5 * time.Second}
	go h.sweepLoop(ctx)
	go h.triggerWhenWarm(ctx)
	go func() {
		<-ctx.Done()
		h.closeStreams()
		_ = srv.Close()
	}()
	h.opts.Log.Info("fleet server listening", "addr", a)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// triggerWhenWarm asks for a pass of every policy once the views are warm,
// so that a new leader decides as soon as it has heard from every node.
func (h *Hub) triggerWhenWarm(ctx context.Context) {
	h.mu.RLock()
	var longest time.Duration
	for _, p := range h.policies {
		longest = max(longest, p.params.ReportInterval)
	}
	h.mu.RUnlock()
	warmUp := h.opts.WarmUp
	if warmUp == 0 {
		warmUp = longest * 3 / 2
	}
	select {
	case <-ctx.Done():
		return
	case <-h.opts.Clock.After(max(warmUp, 0)):
	}
	h.mu.RLock()
	ps := make([]*policy, 0, len(h.policies))
	for _, p := range h.policies {
		ps = append(ps, p)
	}
	h.mu.RUnlock()
	for _, p := range ps {
		h.trigger(p)
	}
}

// nextVersion numbers a directive; h.mu must be held.
func (h *Hub) nextVersion() uint64 {
	h.version++
	return h.version
}

func (h *Hub) policy(id string) *policy {
	p := h.policies[id]
	if p == nil {
		p = &policy{id: id, nodes: map[string]int{}, view: newView()}
		h.policies[id] = p
	}
	return p
}

// SetPolicy gives the hub a policy's detection parameters (from its
// defaulted spec). A change is pushed to the nodes hosting its pods.
func (h *Hub) SetPolicy(id string, params Params) {
	if h.setPolicy(id, params) {
		// A new policy: the pods without a sidecar of its namespace are
		// listed for it too.
		ns, _, _ := strings.Cut(id, "/")
		h.resyncNamespace(ns)
	}
}

// setPolicy is SetPolicy; it reports whether the policy is new.
func (h *Hub) setPolicy(id string, params Params) (added bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.policy(id)
	if p.hasParams && p.params.equal(params) {
		return false
	}
	added = !p.hasParams
	p.params, p.hasParams = params, true
	p.vmu.Lock()
	p.view.th = params.Thresholds
	p.view.interval = params.ReportInterval
	p.vmu.Unlock()
	h.refreshDirective(p, nil, true)
	return added
}

// RemovePolicy forgets a deleted policy and tells its nodes.
func (h *Hub) RemovePolicy(id string) {
	if h.removePolicy(id) {
		ns, _, _ := strings.Cut(id, "/")
		h.resyncNamespace(ns) // its pods without a sidecar are not listed for it any more
	}
}

func (h *Hub) removePolicy(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.policies[id]
	if p == nil {
		return false
	}
	delete(h.policies, id)
	line := h.encode(agentlink.Event{Type: agentlink.TypePolicyRemoved, Removed: id})
	for n := range p.nodes {
		h.sendLine(n, line)
	}
	return true
}

// SetRouting gives the hub a policy's published table (its version and the
// routing.json bytes); a newer one is pushed to the nodes hosting the
// policy's pods. mitigated are the table's keys.
func (h *Hub) SetRouting(id string, version int64, table []byte, mitigated []string) {
	if !json.Valid(table) {
		// The stream carries the table as JSON; the manager marshals every
		// table it publishes, so this is a programming error.
		h.opts.Log.Error(errors.New("routing table is not JSON"), "not pushed", "policy", id, "version", version)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.policy(id)
	if p.routing != nil && p.routing.Version >= version {
		return
	}
	p.routing = &agentlink.Routing{Policy: id, Version: version, Table: table}
	p.mitigated = mitigated
	// Encoded once, whatever the number of nodes it goes to.
	p.routingLine = h.encode(agentlink.Event{Type: agentlink.TypeRouting, Routing: p.routing})
	q := queued{line: p.routingLine, pushed: h.opts.Clock.Now()}
	for n := range p.nodes {
		h.queue(n, q)
	}
	h.metrics.routingPushes.Inc()
}

// UpsertPod records a pod allowed to send counts for a policy: an injected
// pod with an address and a node. A pod without either is removed.
func (h *Hub) UpsertPod(name, nodeName string, pod agentlink.Pod) {
	if nodeName == "" || pod.IP == "" || pod.Policy == "" {
		h.DeletePod(name)
		return
	}
	// Named before the comparison: the stored pod carries its name. Else an
	// unchanged pod (every informer update and resync) was removed and added
	// again, and when it was its node's only pod of the policy the view forgot
	// the node's counts and restarted its keys' time over their thresholds:
	// a key reported at twice its threshold stayed not hot for minutes of
	// updates (controllers TestHotKeyPolicyFlows, thresholds.auto).
	pod.Name = name
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.pods[name]; ok && old == pod && h.podNode[name] == nodeName {
		return
	}
	h.removePod(name)
	h.pods[name] = pod
	h.podNode[name] = nodeName
	n := h.nodes[nodeName]
	if n == nil {
		n = &node{pods: map[string]agentlink.Pod{}}
		h.nodes[nodeName] = n
	}
	n.pods[name] = pod
	p := h.policy(pod.Policy)
	p.nodes[nodeName]++
	if p.nodes[nodeName] == 1 {
		// The node hosts this policy from now on: tell it everything.
		h.sendPolicy(nodeName, p)
		h.refreshDirective(p, nil, false)
		h.setExpected(p)
	}
	h.sendPods(nodeName)
}

// DeletePod forgets a pod.
func (h *Hub) DeletePod(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if node, ok := h.podNode[name]; ok {
		h.removePod(name)
		h.sendPods(node)
	}
}

// removePod drops a pod; h.mu must be held. The caller sends the node's pods.
func (h *Hub) removePod(name string) {
	pod, ok := h.pods[name]
	if !ok {
		return
	}
	nodeName := h.podNode[name]
	delete(h.pods, name)
	delete(h.podNode, name)
	if n := h.nodes[nodeName]; n != nil {
		delete(n.pods, name)
		if len(n.pods) == 0 && n.stream == nil {
			delete(h.nodes, nodeName)
		}
	}
	if p := h.policies[pod.Policy]; p != nil {
		p.nodes[nodeName]--
		if p.nodes[nodeName] <= 0 {
			delete(p.nodes, nodeName)
			h.sendLine(nodeName, h.encode(agentlink.Event{Type: agentlink.TypePolicyRemoved, Removed: p.id}))
			h.refreshDirective(p, nil, false)
			h.setExpected(p)
		}
	}
}

// setExpected tells the policy's view which nodes host its pods.
func (h *Hub) setExpected(p *policy) {
	nodes := make(map[string]bool, len(p.nodes))
	for n := range p.nodes {
		nodes[n] = true
	}
	p.vmu.Lock()
	p.view.setExpected(h.opts.Clock.Now(), nodes)
	p.vmu.Unlock()
}

// refreshDirective recomputes p's directive (floors follow the number of
// nodes) with pins (nil: the current ones) and pushes it when it changed, or
// always if force. h.mu must be held.
func (h *Hub) refreshDirective(p *policy, pins []string, force bool) {
	if !p.hasParams {
		return
	}
	if pins == nil {
		p.vmu.Lock()
		pins = pinsOf(p.view)
		p.vmu.Unlock()
	}
	next := directive(p.id, p.params, len(p.nodes), h.opts.FloorFraction, pins, 0)
	if !force && p.dir.Version != 0 && sameDirective(p.dir, next) {
		return
	}
	next.Version = h.nextVersion()
	p.dir = next
	p.vmu.Lock()
	p.view.setPins(pins, next.Version)
	p.vmu.Unlock()
	p.dirLine = h.encode(agentlink.Event{Type: agentlink.TypePolicy, Directive: &p.dir})
	for n := range p.nodes {
		h.sendLine(n, p.dirLine)
	}
	h.metrics.directives.Inc()
}

// pinsOf lists the view's current pins, sorted.
func pinsOf(v *view) []string {
	out := make([]string, 0, len(v.pins))
	for k := range v.pins {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sendPolicy sends a node everything about a policy it now hosts.
func (h *Hub) sendPolicy(nodeName string, p *policy) {
	if p.hasParams && p.dirLine != nil {
		h.sendLine(nodeName, p.dirLine)
	}
	if p.routingLine != nil {
		h.sendLine(nodeName, p.routingLine)
	}
}

// sendPods sends a node its current pods.
func (h *Hub) sendPods(nodeName string) {
	n := h.nodes[nodeName]
	pods := []agentlink.Pod{}
	if n != nil {
		for _, p := range n.pods {
			pods = append(pods, p)
		}
	}
	h.sendLine(nodeName, h.encode(agentlink.Event{Type: agentlink.TypePods, Pods: pods}))
}
