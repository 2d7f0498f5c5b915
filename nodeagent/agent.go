// Package nodeagent is heatsink's node agent, run as a DaemonSet (one per
// node, `heatsink node-agent`). It
//
//   - receives the access counts of the sidecars on its node over UDP
//     (package sidecarlink), accepting a pod's counts only for the policy
//     the pod was injected for and at a bounded rate per pod;
//   - keeps one windowed heavy-hitter sketch per policy (package sketch) and
//     every tick decides what to tell the elected manager (package summary):
//     the keys at or above the floor the manager set, with a bound on every
//     key it leaves out, exact counts for the keys the manager pinned;
//   - holds a stream from the manager (agentlink) that tells it the
//     policies, the pods of its node and the routing tables, and serves those
//     tables to its node's sidecars (so sidecars need no API credentials and
//     the API server sees one reader, the manager, not one per pod).
//
// It makes no call to the API server: everything comes from the manager,
// whose address is a name that resolves to every manager replica; the agent
// talks to whichever holds the leader lease.
//
// New binds the sockets; Run serves until the context ends. Several agents
// (simulated nodes) can live in one process.
package nodeagent

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/heatsink-dev/heatsink/agentlink"
	"github.com/heatsink-dev/heatsink/nodeagent/bigkeys"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// Defaults of Options.
const (
	DefaultTick            = 100 * time.Millisecond
	DefaultMemoryPerPolicy = 256 << 10
	// DefaultSourceRate is how many entries per second one pod may send.
	// A sidecar sends one entry per distinct key per 100 ms, so this is a
	// pod touching 20,000 distinct keys every 100 ms, sustained.
	DefaultSourceRate = 200_000
	// DefaultMaxKeysPerSummary bounds one policy's listed keys per summary.
	DefaultMaxKeysPerSummary = 2048
	// DefaultBigKeys is how many of its largest keys by value size a policy
	// lists per summary (package bigkeys).
	DefaultBigKeys = 32
)

// Options configure an Agent.
type Options struct {
	// NodeName is the node whose sidecars send to this agent. Required.
	NodeName string
	// ListenAddr is the UDP ingest address, and the TCP address of the
	// routing server for the node's sidecars (same port). Default ":7946".
	ListenAddr string
	// Manager is "host:port" of the managers' fleet endpoint; the host may
	// resolve to several addresses (a headless Service): each is tried until
	// the leader answers. Required.
	Manager string
	// Resolve looks up Manager's host, and the names of the policies'
	// endpoints for the capture; default net.DefaultResolver.
	Resolve func(ctx context.Context, host string) ([]string, error)
	// Token authenticates the agent to the manager; or TokenFile, a file
	// holding it (the mounted Secret), read before each connection to the
	// manager: the agent may start before the manager has created the Secret,
	// and waits for it instead of failing. One of them is required.
	Token     string
	TokenFile string
	// TLS, if set, is used to reach the manager; nil is plaintext.
	TLS *tls.Config
	// Clock is the agent's time: windows, rates, summary timing.
	Clock clock.WithTicker
	// Tick is how often summaries are computed (and sent when due).
	Tick time.Duration
	// ExternalTicks: the agent has no ticker of its own, and the caller
	// calls Agent.Tick every Tick instead. For a simulator running
	// thousands of agents in one process (bench/fleetsim), whose simulated
	// node already wakes every Tick to hand its sidecars' counts over: a
	// timer and a goroutine wake per agent per tick were a large part of
	// its own CPU, which is not the agent's cost on a real node.
	ExternalTicks bool
	// MemoryPerPolicy is each policy's sketch budget in bytes.
	MemoryPerPolicy int
	// SourceRate is the entries per second one pod may send (burst: one
	// second's worth); excess batches are dropped and counted.
	SourceRate float64
	// MaxKeysPerSummary bounds one policy's listed keys per summary.
	MaxKeysPerSummary int
	// BigKeys bounds the keys a policy lists by size (default
	// DefaultBigKeys, at most agentlink.MaxBigKeysPerPolicy), and
	// BigKeyWindow is how long a size counts, one to two windows (default
	// bigkeys.DefaultWindow).
	BigKeys      int
	BigKeyWindow time.Duration
	// Registerer receives the agent's metrics; default a private registry
	// (several agents can live in one process). Gatherer serves them on
	// MetricsAddr; default Registerer if it is one.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// MetricsAddr and ProbeAddr serve /metrics and /healthz, /readyz;
	// "0" or empty disables them.
	MetricsAddr, ProbeAddr string
	// Logger. Default: controller-runtime's.
	Logger *logr.Logger
	// OnRoutingTable, if set, is called after the agent stored a routing
	// table newer than the one it held for policy ("<namespace>/<name>"),
	// from the goroutine reading the manager's stream, so it must return
	// quickly. It is an observation hook (the fleet simulator times when
	// each node agent holds each version, apart from its sidecars'
	// fan-out); the agent needs nothing from it.
	OnRoutingTable func(policy string, version int64)
	// Capture, if set, is an open packet capture (package capture) whose
	// commands the agent counts for the node's pods without a sidecar
	// (docs/capture.md). The agent runs it and closes it.
	Capture *capture.Capture
}

// Node agent is one node's agent.
type Agent struct {
	opts Options
	// summaryVersion is the summary version the manager of the current
	// stream reads (agentlink.ManagerSummaryVersion); 0 before the first.
	summaryVersion atomic.Int32
	conn           *net.UDPConn
	routeLn        net.Listener
	metrics        *metrics
	log            logr.Logger
	session        uint64
	client         *http.Client

	mu       sync.RWMutex
	policies map[string]*policyState // by "<namespace>/<name>"

	sources *sources
	routes  *routes
	up      *uplinkState

	batches, observations, summaries, ticks, summarized atomic.Uint64
	// captured counts the entries the capture handed over.
	captured atomic.Uint64
	// captureStopped: the capture configured (opts.Capture) returned
	// before the agent's end; readiness fails from then on.
	captureStopped atomic.Bool
	// scopeChanged wakes captureLoop (nil without a capture).
	scopeChanged chan struct{}
	// resolvedNames caches the endpoints' names (captureLoop's only).
	resolvedNames map[string]resolved
	// interval is reportInterval, in nanoseconds.
	interval atomic.Int64
	// summaryOut carries each summary from the tick to sendSummaries.
	summaryOut chan []byte
	// external is the summary loop's state under Options.ExternalTicks
	// (Tick may be called from any goroutine, one at a time).
	external struct {
		sync.Mutex
		st sendState
	}
	// dirty says something that can make a summary urgent happened since
	// the last one was built: counts came in, or a directive changed the
	// alert level or the pins. Without it, rates only decay, so no key can
	// newly reach its alert level and an idle agent skips building a
	// summary (a sort of every sketch) until one is due by its interval.
	dirty atomic.Bool
	// movesFailing is signalled when a batch makes a key's move outcomes
	// (summary.MoveUrgentWithRecent) or its refusals (refusalsUrgent)
	// urgent: the summary loop checks at once rather than at its next tick.
	movesFailing chan struct{}
}

// New validates opts and binds the ingest socket and the routing listener,
// so Addr is known before Run (useful with port 0).
func New(opts Options) (*Agent, error) {
	switch {
	case opts.NodeName == "":
		return nil, errors.New("node agent: NodeName is required")
	case opts.Manager == "":
		return nil, errors.New("node agent: Manager (the managers' fleet address) is required")
	case opts.Token == "" && opts.TokenFile == "":
		return nil, errors.New("node agent: Token or TokenFile (shared with the manager) is required")
	}
	if opts.ListenAddr == "" {
		opts.ListenAddr = fmt.Sprintf(":%d", sidecarlink.DefaultPort)
	}
	if opts.Resolve == nil {
		opts.Resolve = net.DefaultResolver.LookupHost
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	opts.Tick = cmpOr(opts.Tick, DefaultTick)
	opts.MemoryPerPolicy = cmpOr(opts.MemoryPerPolicy, DefaultMemoryPerPolicy)
	opts.SourceRate = cmpOr(opts.SourceRate, DefaultSourceRate)
	opts.MaxKeysPerSummary = cmpOr(opts.MaxKeysPerSummary, DefaultMaxKeysPerSummary)
	opts.BigKeys = cmpOr(opts.BigKeys, DefaultBigKeys)
	opts.BigKeyWindow = cmpOr(opts.BigKeyWindow, bigkeys.DefaultWindow)
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.Gatherer == nil {
		opts.Gatherer, _ = opts.Registerer.(prometheus.Gatherer)
	}
	log := ctrl.Log.WithName("node-agent").WithValues("node", opts.NodeName)
	if opts.Logger != nil {
		log = *opts.Logger
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	conn, ln, err := listen(opts.ListenAddr)
	if err != nil {
		return nil, err
	}
	var sess [8]byte
	_, _ = rand.Read(sess[:])
	d := &Agent{
		opts: opts, conn: conn, routeLn: ln, metrics: m, log: log,
		session:  binary.LittleEndian.Uint64(sess[:]) | 1,
		policies: map[string]*policyState{},
		sources:  newSources(opts.SourceRate),
		routes:   newRoutes(),
		up:       &uplinkState{},

		movesFailing: make(chan struct{}, 1),
		summaryOut:   make(chan []byte, 1),
	}
	if opts.Capture != nil {
		if err := RegisterCaptureMetrics(opts.Registerer, opts.Capture, func() bool { return !d.captureStopped.Load() }); err != nil {
			conn.Close()
			ln.Close()
			return nil, err
		}
		d.scopeChanged = make(chan struct{}, 1)
	}
	d.setReportIntervalLocked() // no policy yet; nothing else holds d
	d.client = &http.Client{Transport: &http.Transport{
		TLSClientConfig: opts.TLS, MaxIdleConnsPerHost: 4, MaxConnsPerHost: MaxManagerConns, IdleConnTimeout: 90 * time.Second,
		ForceAttemptHTTP2: false,
	}}
	return d, nil
}

// listen binds the UDP ingest socket and the TCP routing listener on the
// same port. With port 0 the kernel picks the UDP port, and the same number
// may be taken over TCP; then another is tried.
// MaxManagerConns bounds the agent's connections to the manager, pending
// ones included: its event stream, a summary, and one spare so that a new
// stream need not wait behind a summary. Without a bound, a request the
// agent gives up on (the 3-s stream connect, the 2-s summary) leaves its
// connection attempt running (net/http keeps a dial it started, for the
// pool), and a manager that accepts nothing (starved, out of descriptors)
// collects a new pending connection from every agent every few seconds: in
// the fleet simulator at 5,000 nodes, thousands per process, until both
// sides ran out of descriptors (TestAgentBoundsItsConnectionsToAStalledManager).
const MaxManagerConns = 3

func listen(addr string) (*net.UDPConn, net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("node agent: listen address %q: %w", addr, err)
	}
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("node agent: listen on %s/udp: %w", addr, err)
		}
		conn := pc.(*net.UDPConn)
		// A large receive buffer absorbs bursts of batches from many
		// sidecars while the reader is descheduled; the kernel caps it at
		// rmem_max.
		_ = conn.SetReadBuffer(4 << 20)
		ln, err := net.Listen("tcp", conn.LocalAddr().String())
		if err == nil {
			return conn, ln, nil
		}
		conn.Close()
		if port != "0" || attempt == 20 {
			return nil, nil, fmt.Errorf("node agent: listen on %s/tcp: %w", conn.LocalAddr(), err)
		}
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Addr is the bound ingest address (UDP); the routing server listens on the
// same address over TCP.
func (d *Agent) Addr() net.Addr { return d.conn.LocalAddr() }

// RoutingAddr is the routing server's address.
func (d *Agent) RoutingAddr() net.Addr { return d.routeLn.Addr() }

// Stats are counters for tests, the demo and the simulator.
type Stats struct {
	// Batches accepted and Observations (entries) counted; Captured the
	// entries the capture handed over (counted or filtered).
	Batches, Observations, Captured uint64
	// Summaries sent to the manager.
	Summaries uint64
	// Connected: the agent holds a stream from the manager.
	Connected bool
	// Ticks counts the summary loop's ticks (tests step a fake clock by
	// them), Summarized the ticks that built a summary.
	Ticks, Summarized uint64
}

// Stats returns the agent's counters.
func (d *Agent) Stats() Stats {
	return Stats{Batches: d.batches.Load(), Observations: d.observations.Load(), Captured: d.captured.Load(), Summaries: d.summaries.Load(),
		Connected: d.up.connected(), Ticks: d.ticks.Load(), Summarized: d.summarized.Load()}
}

// Tracks reports whether the agent knows policy "<namespace>/<name>".
func (d *Agent) Tracks(policy string) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.policies[policy]
	return ok
}

// Run ingests batches, follows the manager, sends summaries and serves
// routing tables until ctx ends. It closes its sockets on return.
func (d *Agent) Run(ctx context.Context) error {
	defer d.conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	routeSrv := &http.Server{Handler: d.routes.handler(d), ReadHeaderTimeout: 5 * time.Second}
	run(func(context.Context) {
		if err := routeSrv.Serve(d.routeLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error(err, "routing server stopped")
		}
	})
	for _, s := range d.endpoints() {
		run(s)
	}
	run(d.ingest)
	if c := d.opts.Capture; c != nil {
		run(d.captureLoop)
		run(func(ctx context.Context) {
			err := c.Run(ctx, d.countCaptured)
			if ctx.Err() == nil {
				d.captureStopped.Store(true)
				d.log.Error(err, "capture stopped: the agent is not ready until it restarts")
			}
		})
	}
	run(d.uplink)
	run(d.summaryLoop)
	<-ctx.Done()
	shut, cancelShut := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShut()
	_ = routeSrv.Shutdown(shut)
	d.routes.closeAll()
	d.client.CloseIdleConnections()
	wg.Wait()
	return nil
}

// endpoints returns the metrics and probe servers to run, if configured.
func (d *Agent) endpoints() []func(context.Context) {
	var out []func(context.Context)
	serve := func(addr string, h http.Handler) {
		if addr == "" || addr == "0" {
			return
		}
		out = append(out, func(ctx context.Context) {
			srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
			go func() { <-ctx.Done(); _ = srv.Close() }()
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error(err, "endpoint stopped", "addr", addr)
			}
		})
	}
	if d.opts.Gatherer != nil {
		serve(d.opts.MetricsAddr, promhttp.HandlerFor(d.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	probes := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	probes.HandleFunc("/healthz", ok)
	// Ready once the sockets are bound (they are, by New): the agent serves
	// its node's sidecars with the last tables it has even while the
	// manager is away, so the manager's absence must not fail readiness
	// (it would stall every DaemonSet rollout during a failover). A
	// configured capture that stopped does: the node's pods without a
	// sidecar are no longer counted, which nothing else would show (the
	// node agent Service publishes not-ready agents, so the sidecars keep
	// theirs).
	probes.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if d.captureStopped.Load() {
			http.Error(w, "capture not running\n", http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
	serve(d.opts.ProbeAddr, probes)
	return out
}

// addrPort turns a net.Addr into a netip.AddrPort (zero if it is not IP).
func addrPort(a net.Addr) netip.AddrPort {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap
	}
	return netip.AddrPort{}
}

// summaryVersionOrLatest is the summary version to write: the manager's,
// or the latest before any stream answered.
func (d *Agent) summaryVersionOrLatest() int {
	if v := d.summaryVersion.Load(); v != 0 {
		return int(v)
	}
	return agentlink.SummaryVersion
}
