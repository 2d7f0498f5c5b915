package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
)

// design is one design under test: its heatsink binary (whose `manager` is
// run) and its node simulator.
type design struct {
	name, heatsink, nodesim string
	// managerArgs and nodesimArgs are extra arguments; {fleetAddr},
	// {token} and {tokenFile} are replaced by the run's values.
	managerArgs, nodesimArgs []string
	// pods: create a Pod object for every simulated sidecar (on its node,
	// with its address) before the manager starts, for designs whose
	// manager learns the pods from the API server.
	pods bool
	// tokenSecret, if set, is a Secret created in the manager's namespace
	// holding the run's token (key "token"), where the manager reads its
	// fleet token.
	tokenSecret string
}

// settings are what every run shares.
type settings struct {
	sidecarsPerNode int
	traffic         simproto.Config // rates, phases, keys, seed, start timeout
	reads, writes   int64           // the policy's thresholds
	sustainFor      time.Duration
	managerTimeout  time.Duration
	maxRSS          int64 // bytes, over the four processes
	work            string
	leNamespace     string
	// hold keeps the processes up after the probe (for profiles).
	hold time.Duration
	// noLeaderElection runs the manager with --leader-elect=false (the
	// row says so): on cores so loaded that the manager cannot renew its
	// lease, its restarts measure the machine, not the fleet.
	noLeaderElection bool
	// nodesimProcs is the node simulator's GOMAXPROCS (0: Go's default).
	// 1,000 simulated nodes share one process; on a fleet each agent is a
	// process of its own, mostly idle, that a routing frame wakes at once.
	// With as many Ps as cores, Go runs goroutines woken by timers (in a
	// P's own run queue) before those woken by the network (the global
	// queue), so an agent's stream reader waits behind other simulated
	// nodes' timers; with more Ps than cores the kernel shares the cores
	// among them, closer to many processes sharing a machine.
	nodesimProcs int
}

// Result is one design at one fleet size.
type Result struct {
	Design string `json:"design"`
	Nodes  int    `json:"nodes"`
	// Policies is how many policies the run had (each with its own hot
	// keys, sidecar j of each node injected for policy j mod Policies).
	Policies int `json:"policies"`
	Sidecars int `json:"sidecars"`
	// Reached is how far the run got: "done", or the step it stopped at.
	Reached string   `json:"reached"`
	Notes   []string `json:"notes,omitempty"`

	LeaderElection bool      `json:"leaderElection"`
	StartupSeconds float64   `json:"startupSeconds,omitempty"`
	Viral          Detection `json:"viral"`
	Counter        Detection `json:"counter"`
	// Hops are the hot keys' reaction hop by hop ("viral", "counter"; the
	// first policy's; hops.go).
	Hops   map[string]*Hops `json:"hops,omitempty"`
	FanOut FanOut           `json:"fanOut"`
	// AgentFanOut is the same versions from the routing ConfigMap to the
	// node agents holding them (a design's agentRouting events; none for a
	// design without agents): the one centralised step of the fan-out.
	// Samples are (version, node); LastReached counts nodes.
	AgentFanOut FanOut `json:"agentFanOut"`
	// API is kube-apiserver's view by phase (warmup, steady, hot, rest).
	API map[string]APIRates `json:"api,omitempty"`
	// OpenWatches is apiserver_longrunning_requests at the hot event's start.
	OpenWatches map[string]float64    `json:"openWatches,omitempty"`
	Processes   map[string]*ProcStats `json:"processes,omitempty"`
	Versions    []seenVersion         `json:"versions,omitempty"`
	// Probe is the routing probe's fan-out (see probe), over ProbeSidecars
	// (those of the first policy).
	Probe         *FanOut `json:"probe,omitempty"`
	ProbeSidecars int     `json:"probeSidecars,omitempty"`
	// AgentProbe is the probe's version to the node agents.
	AgentProbe *FanOut `json:"agentProbe,omitempty"`
	// HubPush is the manager's timing of its pushes to the agents' streams,
	// read from its /metrics after the probe (designs with the hub,
	// whose manager serves plain-HTTP metrics: --metrics-secure=false).
	HubPush *HubPush `json:"hubPush,omitempty"`
	// PhaseAt is when the node simulator's phases began (its events);
	// MarkAt when the orchestrator read the counters that close them.
	PhaseAt map[string]time.Time `json:"phaseAt,omitempty"`
	MarkAt  map[string]time.Time `json:"markAt,omitempty"`
	// ScrapeSeconds is how long each read of kube-apiserver's /metrics took.
	ScrapeSeconds map[string]float64 `json:"scrapeSeconds,omitempty"`
	// Progress is the node simulator's last start-up progress, Stats its
	// done counters.
	Progress map[string]float64 `json:"progress,omitempty"`
	Stats    map[string]float64 `json:"stats,omitempty"`
	// Load is the machine's 1-minute load average at the end of each
	// phase (warmup, hot, rest).
	Load map[string]float64 `json:"loadAverage,omitempty"`
	Logs string             `json:"logs,omitempty"`
}

// ProcStats are one process's CPU and memory.
type ProcStats struct {
	PID int `json:"pid"`
	// CPU is CPU seconds by phase; CPUPhases their sum (ready to the end),
	// CPUTotal since the process started.
	CPU       map[string]float64 `json:"cpuSeconds"`
	CPUPhases float64            `json:"cpuPhasesSeconds"`
	CPUTotal  float64            `json:"cpuTotalSeconds"`
	PeakRSSMB float64            `json:"peakRSSMB"`
}

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// expand replaces the run's placeholders in args.
func expand(args []string, vars map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		for k, v := range vars {
			a = strings.ReplaceAll(a, "{"+k+"}", v)
		}
		out[i] = a
	}
	return out
}

// saNamespaceFile is where controller-runtime's leader election finds its
// namespace; outside a cluster it is missing and leader election refuses to
// start.
const saNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaderElectionShim wraps argv so that the manager finds saNamespaceFile
// holding ns, without touching the machine: it runs in a private mount
// namespace (unshare) with a small tmpfs over /run that holds only that
// file, so leader election runs as in a cluster. The manager's PID is the
// one started (sh execs it). ok is false when that cannot be done (not
// root, no unshare); the manager then runs without leader election.
func leaderElectionShim(ns string, argv []string) (wrapped []string, ok bool) {
	if _, err := os.Stat(saNamespaceFile); err == nil {
		return argv, true
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		return nil, false
	}
	if err := exec.Command(unshare, "--mount", "--propagation", "private", "true").Run(); err != nil {
		return nil, false
	}
	const script = `set -e
d=$(readlink -f /var/run)
mount -t tmpfs -o size=1m,mode=0755 fleetsim-sa "$d"
mkdir -p "$d/secrets/kubernetes.io/serviceaccount"
printf '%s' "$FLEETSIM_LE_NAMESPACE" >"$d/secrets/kubernetes.io/serviceaccount/namespace"
exec "$@"`
	return append([]string{unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh"}, argv...), true
}

func runOne(ctx context.Context, d design, nodes int, s settings) *Result {
	res := &Result{Design: d.name, Nodes: nodes, Policies: s.traffic.Policies, Sidecars: nodes * s.sidecarsPerNode, Reached: "start"}
	dir := filepath.Join(s.work, fmt.Sprintf("%s-%d", d.name, nodes))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.note("%v", err)
		return res
	}
	res.Logs = dir
	logf("fleetsim: %s N=%d: starting kube-apiserver and etcd", d.name, nodes)
	res.Reached = "control plane"
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		res.note("control plane: %v", err)
		return res
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			logf("fleetsim: stopping the control plane: %v", err)
		}
	}()
	procs := newProcSet()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		pids, err := childrenNamed(name)
		if err != nil || len(pids) != 1 {
			res.note("%s: found %d processes (%v); not measured", name, len(pids), err)
			continue
		}
		procs.add(name, pids[0])
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	kube, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		res.note("client: %v", err)
		return res
	}
	tc := s.traffic
	tc.Nodes, tc.SidecarsPerNode = nodes, s.sidecarsPerNode
	tc.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := cp.Kubeconfig(tc.Kubeconfig); err != nil {
		res.note("kubeconfig: %v", err)
		return res
	}
	tok := make([]byte, 32)
	_, _ = rand.Read(tok)
	tc.Token = hex.EncodeToString(tok)
	if err := setup(runCtx, cp, &tc, s, d, res); err != nil {
		res.note("%v", err)
		return res
	}
	changed := make(chan struct{}, 1)
	versions := make([]*versionWatch, tc.Policies)
	for k := range versions {
		versions[k] = watchRouting(runCtx, kube, tc.Namespace, tc.PolicyName(k), k, changed)
	}
	published := func() bool {
		for _, v := range versions {
			if len(v.snapshot()) == 0 {
				return false
			}
		}
		return true
	}

	// The manager, with its fleet endpoint's address and token (designs
	// that have none ignore them).
	res.Reached = "manager"
	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			res.note("free port: %v", err)
			return res
		}
	}
	tc.ManagerFleet = fmt.Sprintf("127.0.0.1:%d", ports[3])
	tokenFile := filepath.Join(dir, "fleet-token")
	if err := os.WriteFile(tokenFile, []byte(tc.Token), 0o600); err != nil {
		res.note("token: %v", err)
		return res
	}
	vars := map[string]string{"fleetAddr": tc.ManagerFleet, "token": tc.Token, "tokenFile": tokenFile}
	argv := append([]string{d.heatsink, "manager",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--webhook-port=%d", ports[2]),
		"--enable-webhooks=false"}, expand(d.managerArgs, vars)...)
	wrapped, le := leaderElectionShim(s.leNamespace, append(argv, "--leader-elect=true"))
	if s.noLeaderElection {
		wrapped, le = append(argv, "--leader-elect=false"), false
		res.note("leader election off (--no-leader-election)")
	} else if !le {
		wrapped = append(argv, "--leader-elect=false")
		res.note("leader election off: the manager needs %s, which only root with unshare can provide here", saNamespaceFile)
	}
	res.LeaderElection = le
	logf("fleetsim: %s N=%d: starting the manager", d.name, nodes)
	mlog := filepath.Join(dir, "manager.log")
	sup := &supervisor{logPath: mlog, procs: procs, start: func() (*child, error) {
		return startChild("manager", wrapped, []string{"KUBECONFIG=" + tc.Kubeconfig, "POD_NAMESPACE=" + s.leNamespace, "FLEETSIM_LE_NAMESPACE=" + s.leNamespace}, mlog, nil)
	}}
	mgr, err := sup.start()
	if err != nil {
		res.note("%v", err)
		return res
	}
	sup.cur = mgr
	procs.add("manager", mgr.pid())
	if err := waitFor(runCtx, s.managerTimeout, mgr, changed, published); err != nil {
		mgr.stop(10 * time.Second)
		res.note("manager: no routing table published: %v (see %s)", err, mlog)
		return res
	}
	runStart := time.Now()
	supDone := make(chan struct{})
	go func() {
		defer close(supDone)
		sup.run(runCtx, runStart)
	}()
	defer func() {
		cancel(nil)
		<-supDone
		sup.stop(10 * time.Second)
		sup.mu.Lock()
		res.Notes = append(res.Notes, sup.exits...)
		sup.mu.Unlock()
	}()

	// The node simulator.
	res.Reached = "node simulator start-up"
	logf("fleetsim: %s N=%d: starting %d nodes and %d sidecars", d.name, nodes, nodes, tc.Sidecars())
	pr, pw, err := pipe()
	if err != nil {
		res.note("%v", err)
		return res
	}
	store := &eventStore{spn: s.sidecarsPerNode, notify: make(chan simproto.Event, 64)}
	simStart := time.Now()
	var simEnv []string
	if s.nodesimProcs > 0 {
		simEnv = []string{fmt.Sprintf("GOMAXPROCS=%d", s.nodesimProcs)}
	}
	sim, err := startChild("nodesim", append(append([]string{d.nodesim}, tc.Args()...), expand(d.nodesimArgs, vars)...), simEnv,
		filepath.Join(dir, "nodesim.log"), pw)
	pw.Close()
	if err != nil {
		pr.Close()
		res.note("%v", err)
		return res
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		store.read(pr)
		pr.Close()
	}()
	defer func() {
		sim.stop(30 * time.Second)
		<-readerDone
	}()
	procs.addTree("nodesim", sim.pid())
	go guardMemory(runCtx, cancel, procs, s.maxRSS)

	// The phases are measured on the orchestrator's own clock from ready,
	// so a busy node simulator cannot stretch them; its phase events say
	// when its traffic actually changed.
	api := map[string]*apiSnapshot{}
	res.ScrapeSeconds = map[string]float64{}
	snap := func(mark string) {
		t0 := time.Now()
		a, err := scrapeAPIServer(runCtx, kube.Discovery().RESTClient())
		took := time.Since(t0)
		res.ScrapeSeconds[mark] = took.Seconds()
		if err != nil {
			res.note("metrics at %s: %v", mark, err)
			return
		}
		if took > 2*time.Second {
			res.note("kube-apiserver took %.1f s to serve /metrics at %s: that phase boundary is blurred by as much", took.Seconds(), mark)
		}
		api[mark] = a
	}
	// "steady" splits the warm-up for kube-apiserver's view only: its second
	// half, once the manager has settled on the fleet it just heard from,
	// is the fleet at rest (background traffic, nothing hot).
	marks := []struct {
		name, closes, reached string
		after                 time.Duration
	}{
		{phaseSteady, "", "warm-up", tc.HotStart / 2},
		{simproto.PhaseHot, "warmup", "hot", tc.HotStart},
		{simproto.PhaseRest, "hot", "rest", tc.HotStart + tc.HotDuration},
		{"end", "rest", "done", tc.Duration},
	}
	next := 0
	var markC <-chan time.Time
	var readyAt, hotAt time.Time
	res.PhaseAt, res.MarkAt, res.Load = map[string]time.Time{}, map[string]time.Time{}, map[string]float64{}
	deadline := time.NewTimer(tc.StartTimeout + 30*time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-tick.C:
			if readyAt.IsZero() {
				store.mu.Lock()
				p := store.progress
				store.mu.Unlock()
				logf("fleetsim: %s N=%d: start-up: %s", d.name, nodes, fmtProgress(p))
			}
		case <-markC:
			m := marks[next]
			if m.closes != "" {
				procs.mark(m.closes)
				if la, ok := loadAverage(); ok {
					res.Load[m.closes] = la
				}
			}
			snap(m.name)
			res.MarkAt[m.name] = time.Now()
			res.Reached = m.reached
			if m.name == simproto.PhaseHot && api[m.name] != nil {
				res.OpenWatches = api[m.name].longRunning
			}
			if next++; next == len(marks) {
				break loop
			}
			markC = time.After(time.Until(readyAt.Add(marks[next].after)))
		case e, ok := <-store.notify:
			if !ok {
				res.note("node simulator output ended at %s (%s)", res.Reached, exitOf(sim))
				break loop
			}
			switch e.Event {
			case simproto.EventReady:
				readyAt = e.Time()
				res.StartupSeconds = readyAt.Sub(simStart).Seconds()
				res.Reached = "warm-up"
				procs.mark("")
				snap("ready")
				res.MarkAt["ready"] = time.Now()
				markC = time.After(time.Until(readyAt.Add(marks[0].after)))
				deadline.Reset(tc.Duration + simproto.Linger)
				logf("fleetsim: %s N=%d: ready after %.0f s; warm-up %s, hot event %s, rest %s", d.name, nodes, res.StartupSeconds, tc.HotStart, tc.HotDuration, tc.Duration-tc.HotStart-tc.HotDuration)
			case simproto.EventPhase:
				res.PhaseAt[e.Phase] = e.Time()
				if e.Phase == simproto.PhaseHot {
					hotAt = e.Time()
				}
			case simproto.EventError:
				res.note("node simulator: %s", e.Message)
			}
		case <-deadline.C:
			res.note("node simulator: no progress within its bound (%s reached); stopped", res.Reached)
			break loop
		case <-runCtx.Done():
			res.note("stopped: %v", context.Cause(runCtx))
			break loop
		}
	}
	// The counters of the done event, printed as the traffic ended (the
	// simulator lingers after it).
	if !readyAt.IsZero() && res.Reached == "done" {
		waitDone(store, 90*time.Second, func(e simproto.Event) {
			if e.Event == simproto.EventPhase {
				res.PhaseAt[e.Phase] = e.Time()
			}
		})
	}
	if !readyAt.IsZero() {
		res.Notes = append(res.Notes, lateness(readyAt, res.PhaseAt, tc)...)
	}
	// The routing probe, once the phases are measured: a routing change at
	// every fleet size and design, even where the hot event published
	// none (the simulator lingers after done).
	if res.Reached == "done" && !sim.exited() {
		res.Probe, res.ProbeSidecars = probe(runCtx, cp, &tc, versions[0], store), sidecarsOf(0, &tc)
	}
	res.HubPush = scrapeHubPush(runCtx, fmt.Sprintf("127.0.0.1:%d", ports[0]))
	procs.sample()
	if s.hold > 0 {
		logf("fleetsim: %s N=%d: probe done; holding for %s", d.name, nodes, s.hold)
		select {
		case <-time.After(s.hold):
		case <-runCtx.Done():
		}
	}
	// The last progress, the counters, and everything the sidecars said.
	sim.stop(30 * time.Second)
	<-readerDone
	store.mu.Lock()
	res.Progress, res.Stats = store.progress, store.stats
	events := store.routing
	agentEvents := store.agents
	if store.badLines > 0 {
		res.note("%d node simulator lines refused, the first: %s", store.badLines, store.firstBad)
	}
	store.mu.Unlock()
	res.Notes = append(res.Notes, troubles(res.Stats, res.Progress)...)
	res.Notes = append(res.Notes, behindNote(res.Stats)...)
	procs.exited("nodesim", sim)
	res.Processes = procs.snapshot()
	for _, v := range versions {
		res.Versions = append(res.Versions, v.snapshot()...)
	}
	if readyAt.IsZero() {
		return res
	}
	res.API = map[string]APIRates{}
	for _, p := range [][3]string{{"warmup", "ready", simproto.PhaseHot}, {phaseSteady, phaseSteady, simproto.PhaseHot},
		{"hot", simproto.PhaseHot, simproto.PhaseRest}, {"rest", simproto.PhaseRest, "end"}} {
		if a, b := api[p[1]], api[p[2]]; a != nil && b != nil {
			res.API[p[0]] = rates(a, b)
		}
	}
	// Each policy's versions against its own sidecars, then summed up.
	var fs, afs []FanOut
	var fms, afms [][]float64
	var vd, cd []Detection
	var vl, cl [][]float64
	for k, w := range versions {
		vs, ev := w.snapshot(), eventsOf(events, k, &tc)
		f, ms := fanOutSamples(vs, readyAt, res.MarkAt["end"], ev) // the probe's comes after
		fs, fms = append(fs, f), append(fms, ms)
		f, ms = fanOutSamples(vs, readyAt, res.MarkAt["end"], agentEvents[k])
		afs, afms = append(afs, f), append(afms, ms)
		if !hotAt.IsZero() {
			d, l := detectSamples(vs, tc.ViralKeyOf(k), hotAt, ev)
			vd, vl = append(vd, d), append(vl, l)
			d, l = detectSamples(vs, tc.CounterKeyOf(k), hotAt, ev)
			cd, cl = append(cd, d), append(cl, l)
		}
	}
	res.FanOut, res.AgentFanOut = mergeFanOuts(fs, fms), mergeFanOuts(afs, afms)
	if res.Probe != nil && res.Probe.Versions > 0 {
		for _, v := range versions[0].snapshot() {
			if v.Version == res.Probe.LastVersion && len(agentEvents[0]) > 0 {
				ap := probeFanOut(v, agentEvents[0])
				res.AgentProbe = &ap
			}
		}
	}
	if !hotAt.IsZero() {
		res.Viral, res.Counter = mergeDetections(vd, vl), mergeDetections(cd, cl)
		vs, ev := versions[0].snapshot(), eventsOf(events, 0, &tc)
		res.Hops = map[string]*Hops{}
		for name, key := range map[string]string{"viral": tc.ViralKeyOf(0), "counter": tc.CounterKeyOf(0)} {
			// A key under its threshold is never crossed: were it published,
			// its hops are timed from the start.
			cross, _ := crossing(tc.ViralRate, s.reads)
			if name == "counter" {
				cross, _ = crossing(tc.CounterRate, s.writes)
			}
			if h := hopsOf(vs, key, hotAt, cross, s.sustainFor, agentEvents[0], ev, s.sidecarsPerNode); h != nil {
				res.Hops[name] = h
			}
		}
	}
	return res
}

func exitOf(c *child) string {
	select {
	case <-c.done:
		if c.err != nil {
			return c.err.Error()
		}
		return "exit status 0"
	case <-time.After(5 * time.Second):
		return "still running"
	}
}

// waitFor waits until cond holds, checking whenever changed fires and every
// second, for at most timeout, or until c exits.
func waitFor(ctx context.Context, timeout time.Duration, c *child, changed <-chan struct{}, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s", timeout)
		case <-c.done:
			return fmt.Errorf("%s exited: %v", c.name, c.err)
		case <-changed:
		case <-t.C:
		}
	}
	return nil
}

// guardMemory stops the run when the measured processes together use more
// than limit bytes: on a shared machine a design that cannot hold 10,000
// sidecars must not take the machine down with it.
func guardMemory(ctx context.Context, cancel context.CancelCauseFunc, procs *procSet, limit int64) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if rss := procs.sample(); rss > limit {
				cancel(fmt.Errorf("memory limit: the manager, node simulator, kube-apiserver and etcd use %d MiB, over %d MiB", rss>>20, limit>>20))
				return
			}
		}
	}
}
