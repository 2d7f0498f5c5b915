// Command nodesim is the fleet design's node simulator for the fleet
// simulator (bench/fleetsim): this tree's node agent, N times in one
// process.
//
//   - N simulated nodes, each a real node agent (nodeagent.New + Run) on its
//     own loopback address (simproto.NodeIP), streaming from the elected
//     manager's fleet endpoint (--manager-fleet, --token; plaintext, as the
//     orchestrator runs the manager with --fleet-tls=false) and sending it
//     summaries;
//   - 10 × N simulated sidecars, each counting its share of the traffic as
//     the sidecar's wire client does and handing the node agent real wire
//     batches from the sidecar's pod address (simproto.SidecarIP), which the
//     agent checks against the pods the manager told it about (see
//     counter for why not over UDP by default); and each following its
//     node agent's routing stream with the real dataplane/watch.Watcher,
//     from its pod address, in a child process (see followers.go).
//
// It speaks the fleet simulator's contract (package simproto: flags,
// JSON-line events on stdout, the traffic).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // --pprof
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
	"github.com/heatsink-dev/heatsink/dataplane/counts"
	"github.com/heatsink-dev/heatsink/nodeagent"
)

func main() { os.Exit(run(os.Args[1:])) }

// Transports from a simulated sidecar to its node agent.
const (
	// transportDirect hands each batch to the agent's HandleDatagram.
	transportDirect = "direct"
	// transportUDP sends it with a counts.Client per sidecar, bound to the
	// sidecar's address.
	transportUDP = "udp"
)

// options are nodesim's own flags, beside simproto.Config's.
type options struct {
	startRate float64
	// startWindow bounds the agents started that do not yet hold the
	// manager's stream (see admit).
	startWindow int
	transport   string
	follow      bool
	pprof       string
	// followPprof is passed to the followers' child as its --pprof.
	followPprof string
	// processes is how many processes run the nodes (0: as few as the
	// open-files limit allows); rangeFirst and rangeCount, the nodes a
	// member process (or a followers' child) runs, given by its parent
	// (rangeCount 0: all).
	processes              int
	rangeFirst, rangeCount int
}

// nodes is the range of the fleet's nodes this process runs.
func (o *options) nodes(c simproto.Config) simproto.Range {
	if o.rangeCount == 0 {
		return simproto.Range{First: 0, Count: c.Nodes}
	}
	return simproto.Range{First: o.rangeFirst, Count: o.rangeCount}
}

func bindOptions(fs *flag.FlagSet) *options {
	o := &options{}
	fs.Float64Var(&o.startRate, "start-rate", 500, "node agents, and routing followers, started per second")
	fs.IntVar(&o.startWindow, "start-window", 200, "at most this many node agents started and not yet holding the manager's stream, over the fleet (shared among member processes)")
	fs.StringVar(&o.transport, "transport", transportDirect, "how sidecars' batches reach their agent: direct (HandleDatagram, no socket) or udp (a counts.Client per sidecar from its address; needs a descriptor each)")
	fs.BoolVar(&o.follow, "follow", false, "internal: be the routing followers' child process (agents' routing addresses on stdin)")
	fs.StringVar(&o.pprof, "pprof", "", "serve net/http/pprof on this loopback address")
	fs.StringVar(&o.followPprof, "follow-pprof", "", "the routing followers' child process serves net/http/pprof on this loopback address")
	fs.IntVar(&o.processes, "processes", 0, "split the nodes over this many member processes, each with its own open-files limit (0: as few as the limit allows)")
	fs.IntVar(&o.rangeFirst, "range-first", 0, "internal: the first node a member process runs")
	fs.IntVar(&o.rangeCount, "range-count", 0, "internal: how many nodes a member process runs, from --range-first (0: all; a member starts its traffic when the coordinator writes the start instant on its stdin)")
	return o
}

// parseFlags parses args into simproto's Config and nodesim's options and
// says what is wrong with them, all of it at once.
func parseFlags(args []string) (simproto.Config, *options, error) {
	c := simproto.Defaults()
	fs := flag.NewFlagSet("nodesim", flag.ContinueOnError)
	c.Bind(fs)
	o := bindOptions(fs)
	if err := fs.Parse(args); err != nil {
		return c, o, err
	}
	errs := []error{c.Validate()}
	if o.startRate <= 0 || o.startRate > 10000 {
		errs = append(errs, fmt.Errorf("--start-rate %g: want (0, 10000]", o.startRate))
	}
	if o.startWindow < 1 {
		errs = append(errs, fmt.Errorf("--start-window %d: want 1 or more", o.startWindow))
	}
	if o.processes < 0 {
		errs = append(errs, fmt.Errorf("--processes %d: want 0 or more", o.processes))
	}
	if o.rangeCount < 0 || o.rangeFirst < 0 || o.rangeFirst+o.rangeCount > c.Nodes {
		errs = append(errs, fmt.Errorf("--range-first %d --range-count %d: want a range within the %d nodes", o.rangeFirst, o.rangeCount, c.Nodes))
	}
	if o.transport != transportDirect && o.transport != transportUDP {
		errs = append(errs, fmt.Errorf("--transport %q: want %s or %s", o.transport, transportDirect, transportUDP))
	}
	if !o.follow {
		if _, _, err := net.SplitHostPort(c.ManagerFleet); err != nil {
			errs = append(errs, fmt.Errorf("--manager-fleet %q: want the manager's fleet host:port: the fleet design's node agents stream from it", c.ManagerFleet))
		}
		if c.Token == "" {
			errs = append(errs, errors.New("--token is required: the manager's fleet endpoint refuses agents without it"))
		}
	}
	return c, o, errors.Join(errs...)
}

func run(args []string) int {
	c, o, err := parseFlags(args)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "nodesim:", err)
		}
		return 2
	}
	if err := servePprof(o.pprof); err != nil {
		fmt.Fprintln(os.Stderr, "nodesim:", err)
		return 2
	}
	if o.follow {
		return followMain(c, o)
	}
	limit := raiseNoFile()
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.StartTimeout+c.Duration+simproto.Linger+time.Minute)
	defer cancel()
	if o.rangeCount == 0 {
		ranges, err := splitNodes(c.Nodes, nodesPerProcess(usableFiles(limit), o.transport, c.SidecarsPerNode), o.processes)
		if err != nil {
			fmt.Fprintf(os.Stderr, "nodesim: --transport %s, open-files limit %d: %v\n", o.transport, limit, err)
			return 2
		}
		if len(ranges) > 1 {
			out := simproto.NewWriter(os.Stdout)
			defer out.Close()
			return runCoordinator(ctx, c, o, ranges, out)
		}
	}
	r := o.nodes(c)
	if need := descriptorsNeeded(simproto.Config{Nodes: r.Count, SidecarsPerNode: c.SidecarsPerNode}, o.transport); need > usableFiles(limit) {
		fmt.Fprintf(os.Stderr, "nodesim: %d nodes with --transport %s need about %d open files, over %d of the limit %d\n", r.Count, o.transport, need, usableFiles(limit), limit)
		return 2
	}
	ctrl.SetLogger(logr.Discard())

	s := &sim{c: c, o: o, r: r, out: simproto.NewWriter(os.Stdout)}
	defer s.out.Close()
	code := s.run(ctx)
	cancel()
	s.shutdown()
	return code
}

// servePprof serves net/http/pprof's handlers on addr, a loopback
// address; empty: none.
func servePprof(addr string) error {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof: want a free loopback address: %w", err)
	}
	if !l.Addr().(*net.TCPAddr).IP.IsLoopback() {
		l.Close()
		return fmt.Errorf("--pprof %s: want a loopback address", addr)
	}
	go func() { _ = http.Serve(l, nil) }()
	return nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// descriptorsNeeded estimates the parent's open files: per node, the
// agent's UDP socket, routing listener and its connections to the manager
// (its stream, its summaries and a spare: nodeagent.MaxManagerConns bounds
// them, pending ones included, so a starved manager costs no more); per
// sidecar, the agent's end of its routing stream and, over UDP, its wire
// client's socket; and a margin.
func descriptorsNeeded(c simproto.Config, transport string) uint64 {
	perSidecar := 1
	if transport == transportUDP {
		perSidecar = 2
	}
	return uint64((2+nodeagent.MaxManagerConns)*c.Nodes + perSidecar*c.Sidecars() + 256)
}

// usableFiles is the part of the open-files limit a member plans for: the
// rest absorbs what the estimate leaves out (a follower's stream being
// replaced holds its old connection until the agent notices it closed).
func usableFiles(limit uint64) uint64 { return limit / 10 * 9 }

// raiseNoFile raises the soft open-files limit to the hard limit and
// returns it.
func raiseNoFile() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 1024
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
		}
	}
	return l.Cur
}

// node is one simulated node: its agent, the registry its metrics go to,
// and its sidecars' counting clients.
type node struct {
	agent    *nodeagent.Agent
	reg      *prometheus.Registry
	counters []*counter       // --transport direct
	clients  []*counts.Client // --transport udp
	batches  atomic.Uint64    // batches handed to the agent (direct)
	entries  atomic.Uint64
	// driven: the node's traffic goroutine ticks its agent (see ticks).
	driven atomic.Bool
}

// sim is one run, of the nodes of r.
type sim struct {
	c   simproto.Config
	o   *options
	r   simproto.Range
	out *simproto.Writer

	mu     sync.Mutex
	nodes  []*node
	agents sync.WaitGroup

	follow *followerChild
}

func (s *sim) run(ctx context.Context) int {
	began := time.Now()
	startCtx, startDone := context.WithTimeout(ctx, s.c.StartTimeout)
	defer startDone()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-startCtx.Done():
				return
			case <-t.C:
				s.out.Progress(time.Now(), s.progress())
			}
		}
	}()
	if s.o.transport == transportDirect {
		go s.idleTicks(ctx)
	}
	err := s.start(startCtx, ctx)
	startDone()
	<-progressDone
	if err != nil {
		s.out.Progress(time.Now(), s.progress())
		s.out.Error(time.Now(), err.Error())
		return 1
	}
	readyAt := time.Now()
	sentAtReady := s.summariesSent()
	s.out.Ready(readyAt)
	start := readyAt
	if s.o.rangeCount > 0 {
		// A member: the fleet's traffic starts when every member is ready.
		if start, err = readStart(os.Stdin); err != nil {
			s.out.Error(time.Now(), err.Error())
			return 1
		}
	}
	s.follow.trafficStarted()
	st, err := simproto.RunRange(ctx, &s.c, s.r, s.observers(), start, s.out.Phase, s.flusher())
	for _, n := range s.snapshot() {
		n.driven.Store(false) // back to idleTicks
	}
	if err != nil {
		s.out.Error(time.Now(), err.Error())
		return 1
	}
	stats := st.Map()
	for k, v := range s.progress() {
		stats[k] = v
	}
	for k, v := range s.counters() {
		stats[k] = v
	}
	stats["startup_seconds"] = readyAt.Sub(began).Seconds()
	// The summaries of the traffic alone, for the manager's cost per
	// summary (the orchestrator measures its CPU from ready).
	stats["agent_summaries_sent_in_traffic"] = stats["agent_summaries_sent"] - sentAtReady
	s.out.Done(time.Now(), stats)
	if ctx.Err() != nil {
		return 1
	}
	// Up until the orchestrator has read its counters and stops us.
	select {
	case <-ctx.Done():
	case <-time.After(simproto.Linger):
	}
	return 0
}

// pace waits until the n-th start is due at rate per second from t0.
func pace(ctx context.Context, t0 time.Time, n int, rate float64) error {
	due := t0.Add(time.Duration(float64(n) / rate * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return ctx.Err()
}

// poll calls done every 50ms until it holds or ctx ends.
func poll(ctx context.Context, done func() bool) error {
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// start starts the agents, waits until each holds the manager's stream and
// knows every policy (and so its node's pods and routing table), then starts
// the sidecars' routing followers and waits until each accepted a first
// table. startCtx bounds the start-up; runCtx is what the agents live in.
func (s *sim) start(startCtx, runCtx context.Context) error {
	notReady := func(what string, err error) error {
		p := s.progress()
		return fmt.Errorf("not ready within %s (%s: %v): %d/%d nodes started, %d connected, %d tracking the policy, %d/%d sidecars started, %d synced",
			s.c.StartTimeout, what, err, int(p["nodes_started"]), s.r.Count, int(p["nodes_connected"]), int(p["nodes_tracking"]),
			int(p["sidecars_started"]), s.sidecarCount(), int(p["sidecars_synced"]))
	}
	discard := logr.Discard()
	policyIndex := map[string]int{}
	for k := range max(s.c.Policies, 1) {
		policyIndex[s.c.PolicyRefOf(k)] = k
	}
	t0 := time.Now()
	for k := range s.r.Count {
		i := s.r.First + k
		if err := pace(startCtx, t0, k, s.o.startRate); err != nil {
			return notReady("starting node agents", err)
		}
		if err := s.admit(startCtx); err != nil {
			return notReady("node agents connecting to the manager", err)
		}
		reg := prometheus.NewRegistry()
		d, err := nodeagent.New(nodeagent.Options{
			NodeName: simproto.NodeName(i), ListenAddr: simproto.NodeIP(i) + ":0",
			Manager: s.c.ManagerFleet, Token: s.c.Token, Registerer: reg, Logger: &discard,
			// Ticked by its node (see ticks), every NodeTick: the
			// agent's own interval, nodeagent.DefaultTick.
			Tick: simproto.NodeTick, ExternalTicks: s.o.transport == transportDirect,
			// When this agent holds each version: the manager → agents
			// step of the fan-out, apart from agent → sidecars.
			OnRoutingTable: func(policy string, version int64) {
				if k, ok := policyIndex[policy]; ok {
					s.out.AgentRouting(i, k, version, time.Now())
				}
			},
		})
		if err != nil {
			return fmt.Errorf("node agent %d: %w", i, err)
		}
		n := &node{agent: d, reg: reg}
		if err := s.sidecars(n, i); err != nil {
			return err
		}
		s.mu.Lock()
		s.nodes = append(s.nodes, n)
		s.mu.Unlock()
		s.agents.Add(1)
		go func() {
			defer s.agents.Done()
			_ = d.Run(runCtx)
		}()
	}
	if err := poll(startCtx, func() bool {
		for _, n := range s.snapshot() {
			if !n.agent.Stats().Connected || !s.tracksAll(n.agent) {
				return false
			}
		}
		return true
	}); err != nil {
		return notReady("node agents connecting to the manager", err)
	}
	addrs := make([]string, s.r.Count)
	for k, n := range s.snapshot() {
		addrs[k] = n.agent.RoutingAddr().String()
	}
	fc, err := startFollowers(s.c, s.o, s.r, addrs, s.out)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.follow = fc
	s.mu.Unlock()
	if err := poll(startCtx, func() bool {
		if gone, _ := fc.exited(); gone {
			return true
		}
		synced, _ := fc.progress()
		return synced == s.sidecarCount()
	}); err != nil {
		return notReady("sidecars receiving their first table", err)
	}
	if gone, err := fc.exited(); gone {
		return fmt.Errorf("%w: %v", errFollowersGone, err)
	}
	return nil
}

// admit waits until fewer than the start window of this process's agents
// are started and not yet holding the manager's stream. A fleet's nodes do
// not all boot in the same second, and the start-up is not measured (the
// phases are timed from ready); without a window, 5,000 agents started at
// 500 a second kept the manager's accept queue full on two loaded cores,
// each agent gave up on its stream after 3 s and tried again, and the
// retries kept it full: after 4 minutes none held a stream, and the
// starved manager lost its lease.
func (s *sim) admit(ctx context.Context) error {
	return poll(ctx, func() bool {
		waiting := 0
		for _, n := range s.snapshot() {
			if !n.agent.Stats().Connected {
				waiting++
			}
		}
		return waiting < s.o.startWindow
	})
}

// sidecars makes node i's sidecars' counting clients.
func (s *sim) sidecars(n *node, i int) error {
	for j := range s.c.SidecarsPerNode {
		ip := simproto.SidecarIP(i, j)
		if s.o.transport == transportUDP {
			wc, err := counts.NewClient(n.agent.Addr().String(), counts.ClientOptions{LocalAddr: ip})
			if err != nil {
				return fmt.Errorf("sidecar %d/%d: %w", i, j, err)
			}
			n.clients = append(n.clients, wc)
			continue
		}
		n.counters = append(n.counters, newCounter(netip.MustParseAddr(ip), defaultMaxKeys))
	}
	return nil
}

// sidecarCount is how many sidecars this process simulates.
func (s *sim) sidecarCount() int { return s.r.Count * s.c.SidecarsPerNode }

func (s *sim) snapshot() []*node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*node(nil), s.nodes...)
}

// observers are the sidecars' counting clients, sidecar j of node
// r.First+k at k*SidecarsPerNode+j.
func (s *sim) observers() []simproto.Observer {
	var obs []simproto.Observer
	for _, n := range s.snapshot() {
		for _, c := range n.counters {
			obs = append(obs, c)
		}
		for _, c := range n.clients {
			obs = append(obs, c)
		}
	}
	return obs
}

// flusher returns, for --transport direct, what hands node i's sidecars'
// counts to its agent after each of the node's traffic ticks (simproto.RunNodes
// calls it from the node's goroutine, after the last tick too, as a wire
// client's Close flushes): every 100 ms, a wire client's own interval
// (sidecarlink.FlushInterval = simproto.NodeTick). A goroutine of its own per
// node would wake 1,000 more goroutines ten times a second for nothing.
func (s *sim) flusher() func(i int) {
	if s.o.transport != transportDirect {
		return nil
	}
	nodes := s.snapshot()
	bufs := make([][]byte, len(nodes))
	return func(i int) {
		k := i - s.r.First
		n := nodes[k]
		// The agent's tick, then its sidecars' counts (see ticks).
		n.driven.Store(true)
		n.agent.Tick()
		if bufs[k] == nil {
			bufs[k] = make([]byte, 0, maxDatagram)
		}
		for _, c := range n.counters {
			b, e := c.flush(bufs[k], n.agent.HandleDatagram)
			n.batches.Add(uint64(b))
			n.entries.Add(uint64(e))
		}
	}
}

// idleTicks ticks, every NodeTick, the agents (made with
// nodeagent.Options.ExternalTicks) whose node's traffic goroutine does not:
// during the start-up, before the traffic starts and after it ends (the
// routing probe). During the traffic each node ticks its own agent, from
// the goroutine that hands its sidecars' counts over (flusher), every
// NodeTick, the agent's own interval: 1,000 agents' tickers and the wake of
// each agent's summary loop ten times a second were a large part of the
// simulator's CPU (scheduler and timers: 20 to 30 % of its profile at 1,000
// and 2,500 nodes), a cost of running thousands of agents in one process
// that a real node does not have. The agent ticks just before its
// sidecars' counts of the tick are handed over, so they wait a whole tick
// for it (on a real node the two are out of step: half a tick on average):
// the simulator adds up to a tick to detection, never takes one off. Its
// lag is the node's tick lag (simproto.Lag), which the row reports.
func (s *sim) idleTicks(ctx context.Context) {
	t := time.NewTicker(simproto.NodeTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, n := range s.snapshot() {
			if !n.driven.Load() {
				n.agent.Tick()
			}
		}
	}
}

// tracksAll reports whether agent knows every policy of the run.
func (s *sim) tracksAll(agent *nodeagent.Agent) bool {
	for k := range s.c.Policies {
		if !agent.Tracks(s.c.PolicyRefOf(k)) {
			return false
		}
	}
	return true
}

// progress is how far the start-up got.
func (s *sim) progress() map[string]float64 {
	nodes := s.snapshot()
	connected, tracking := 0, 0
	for _, n := range nodes {
		if n.agent.Stats().Connected {
			connected++
		}
		if s.tracksAll(n.agent) {
			tracking++
		}
	}
	p := map[string]float64{
		"nodes": float64(s.r.Count), "sidecars": float64(s.sidecarCount()),
		"nodes_started": float64(len(nodes)), "nodes_connected": float64(connected), "nodes_tracking": float64(tracking),
	}
	s.mu.Lock()
	fc := s.follow
	s.mu.Unlock()
	if fc != nil {
		synced, st := fc.progress()
		p["sidecars_synced"] = float64(synced)
		p["sidecars_started"] = st["followers_started"]
		for k, v := range st {
			p[k] = v
		}
	}
	return p
}

// shutdown stops the followers' process and closes the sidecars' clients,
// and waits (bounded) for the agents, whose context has ended, to return.
func (s *sim) shutdown() {
	s.mu.Lock()
	fc := s.follow
	s.mu.Unlock()
	if fc != nil {
		fc.stop(10 * time.Second)
	}
	for _, n := range s.snapshot() {
		for _, c := range n.clients {
			_ = c.Close()
		}
	}
	done := make(chan struct{})
	go func() {
		s.agents.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		fmt.Fprintln(os.Stderr, "nodesim: node agents still stopping after 20s; exiting")
	}
}
