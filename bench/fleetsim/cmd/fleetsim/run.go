package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/heatsink-dev/heatsink/api/v1alpha1"
	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
	"github.com/heatsink-dev/heatsink/internal/testing/controlplane"
	"github.com/heatsink-dev/heatsink/routing"
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
	FanOut         FanOut    `json:"fanOut"`
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
	Logs     string             `json:"logs,omitempty"`
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

// eventStore collects what the node simulator prints. The reader only
// parses and stores, never waits, so the simulator never blocks on its
// stdout; the run loop is told of the events it waits on.
type eventStore struct {
	spn    int
	notify chan simproto.Event

	mu      sync.Mutex
	routing []sidecarEvent
	// agents are the agentRouting events, each as a sidecarEvent whose
	// sidecar is the node, by policy.
	agents    map[int][]sidecarEvent
	progress  map[string]float64
	stats     map[string]float64
	errMsg    string
	badLines  int
	firstBad  string
	readerEnd error
}

func (s *eventStore) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		e, err := simproto.ParseEvent(sc.Bytes())
		s.mu.Lock()
		switch {
		case err != nil:
			s.badLines++
			if s.firstBad == "" {
				s.firstBad = err.Error()
			}
		case e.Event == simproto.EventRouting:
			s.routing = append(s.routing, sidecarEvent{sidecar: e.Node*s.spn + e.Sidecar, version: e.Version, at: e.Time()})
		case e.Event == simproto.EventAgentRouting:
			if s.agents == nil {
				s.agents = map[int][]sidecarEvent{}
			}
			s.agents[e.Policy] = append(s.agents[e.Policy], sidecarEvent{sidecar: e.Node, version: e.Version, at: e.Time()})
		case e.Event == simproto.EventProgress:
			s.progress = e.Stats
		case e.Event == simproto.EventDone:
			s.stats = e.Stats
		case e.Event == simproto.EventError:
			s.errMsg = e.Message
		}
		s.mu.Unlock()
		if err == nil && e.Event != simproto.EventRouting && e.Event != simproto.EventAgentRouting && e.Event != simproto.EventProgress {
			select {
			case s.notify <- e:
			default: // the run loop stopped listening
			}
		}
	}
	s.mu.Lock()
	s.readerEnd = sc.Err()
	s.mu.Unlock()
	close(s.notify)
}

// versionWatch is the orchestrator's own watch of the routing ConfigMap:
// the first time each table version appears, with its keys.
type versionWatch struct {
	policy   int
	mu       sync.Mutex
	versions []seenVersion
	seen     map[int64]bool
	changed  chan struct{}
}

func (w *versionWatch) offer(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	at := time.Now()
	var t struct {
		Version int64 `json:"version"`
		Entries []struct {
			Key string `json:"key"`
		} `json:"entries"`
	}
	if json.Unmarshal([]byte(cm.Data[routing.ConfigMapKey]), &t) != nil || t.Version <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[t.Version] {
		return
	}
	w.seen[t.Version] = true
	keys := make([]string, len(t.Entries))
	for i, e := range t.Entries {
		keys[i] = e.Key
	}
	w.versions = append(w.versions, seenVersion{Policy: w.policy, Version: t.Version, At: at, Keys: keys})
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *versionWatch) snapshot() []seenVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]seenVersion(nil), w.versions...)
}

// watchRouting starts the orchestrator's watch of policy number k's
// routing ConfigMap (one LIST, then one long WATCH request); changed is
// told of each new version.
func watchRouting(ctx context.Context, kube kubernetes.Interface, ns, policy string, k int, changed chan struct{}) *versionWatch {
	w := &versionWatch{policy: k, seen: map[int64]bool{}, changed: changed}
	lw := toolscache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "configmaps", ns,
		fields.OneTermEqualSelector("metadata.name", routing.ConfigMapName(policy)))
	_, inf := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw, ObjectType: &corev1.ConfigMap{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    w.offer,
			UpdateFunc: func(_, obj any) { w.offer(obj) },
		},
	})
	go inf.RunWithContext(ctx)
	return w
}

// procSet tracks the four processes measured. Peak memory is sampled
// while they run (VmHWM), so a process that exits on its own still has one;
// a process replaced by a restart keeps its CPU time in base.
type procSet struct {
	mu    sync.Mutex
	procs map[string]*procEntry
	stats map[string]*ProcStats
	last  map[string]float64 // CPU seconds at the last phase mark
}

type procEntry struct {
	pid  int
	base float64 // CPU seconds of the earlier processes of this name
	// tree: measure the process with its descendants (the fleet design's
	// node simulator runs its routing followers in a child process).
	tree bool
}

func newProcSet() *procSet {
	return &procSet{procs: map[string]*procEntry{}, stats: map[string]*ProcStats{}, last: map[string]float64{}}
}

func (p *procSet) add(name string, pid int) { p.addEntry(name, &procEntry{pid: pid}) }

// addTree measures pid with its descendants.
func (p *procSet) addTree(name string, pid int) { p.addEntry(name, &procEntry{pid: pid, tree: true}) }

func (p *procSet) addEntry(name string, e *procEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.procs[name] = e
	pid := e.pid
	p.stats[name] = &ProcStats{PID: pid, CPU: map[string]float64{}}
}

// replaced moves the CPU time of an exited child into its name's base.
func (p *procSet) replaced(name string, c *child) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.procs[name]; e != nil && e.pid == c.pid() {
		e.base += c.cpuSeconds()
		e.pid = 0
	}
}

// setPID is the new process of a name.
func (p *procSet) setPID(name string, pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.procs[name]; e != nil {
		e.pid = pid
		p.stats[name].PID = pid
	}
}

// cpuLocked is a name's CPU seconds, all its processes together; ok is
// false when the current one cannot be read.
func (p *procSet) cpuLocked(name string) (float64, bool) {
	e := p.procs[name]
	if e.pid == 0 {
		return e.base, true
	}
	if e.tree {
		cpu, err := treeCPU(e.pid)
		return e.base + cpu, err == nil
	}
	st, err := readStat(e.pid)
	if err != nil {
		return 0, false
	}
	return e.base + st.cpuSeconds, true
}

// mark closes phase (if not empty) at the current CPU times.
func (p *procSet) mark(phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.procs {
		cpu, ok := p.cpuLocked(name)
		if !ok {
			continue
		}
		ps := p.stats[name]
		if phase != "" {
			ps.CPU[phase] = cpu - p.last[name]
			ps.CPUPhases += ps.CPU[phase]
		}
		p.last[name] = cpu
	}
	p.sampleLocked()
}

// sample records each live process's peak RSS and CPU time and returns the
// sum of their resident sets now.
func (p *procSet) sample() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sampleLocked()
}

func (p *procSet) sampleLocked() int64 {
	var sum int64
	for name, e := range p.procs {
		ps := p.stats[name]
		if cpu, ok := p.cpuLocked(name); ok {
			ps.CPUTotal = cpu
		}
		if e.pid == 0 {
			continue
		}
		read := readStatus
		if e.tree {
			read = treeStatus
		}
		m, err := read(e.pid)
		if err != nil {
			continue
		}
		sum += m.rss
		ps.PeakRSSMB = max(ps.PeakRSSMB, float64(m.peak)/(1<<20))
	}
	return sum
}

// exited records the CPU time of a child that exited on its own.
func (p *procSet) exited(name string, c *child) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.procs[name]; e != nil && c.exited() && e.pid == c.pid() {
		p.stats[name].CPUTotal = e.base + c.cpuSeconds()
	}
}

func (p *procSet) snapshot() map[string]*ProcStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// runOne runs one design at one fleet size. It always returns a result; what
// went wrong is in its Reached and Notes.
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
	if !le {
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
	res.PhaseAt, res.MarkAt = map[string]time.Time{}, map[string]time.Time{}
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

// setup creates the namespaces, the policy and, for designs that learn
// pods from the API server, one Pod per simulated sidecar.
func setup(ctx context.Context, cp *controlplane.ControlPlane, tc *simproto.Config, s settings, d design, res *Result) error {
	for _, ns := range []string{tc.Namespace, s.leNamespace} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	// A Redis address where nothing listens: the hot event needs no Redis
	// work (no replicas; a first split is only announced), and anything
	// else fails fast.
	redisPort, err := freePort()
	if err != nil {
		return err
	}
	for k := range tc.Policies {
		pol := &v1alpha1.HotKeyPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: tc.Namespace, Name: tc.PolicyName(k)},
			Spec: v1alpha1.HotKeyPolicySpec{
				Target:      v1alpha1.RedisTarget{Addresses: []string{fmt.Sprintf("127.0.0.1:%d", redisPort)}},
				Thresholds:  v1alpha1.Thresholds{ReadsPerSecond: s.reads, WritesPerSecond: s.writes, SustainFor: metav1.Duration{Duration: s.sustainFor}},
				Mitigations: v1alpha1.Mitigations{Split: v1alpha1.Split{Enabled: ptr.To(true)}},
			},
		}
		v1alpha1.SetDefaults(&pol.Spec)
		if err := cp.Client.Create(ctx, pol); err != nil {
			return fmt.Errorf("policy %s: %w", pol.Name, err)
		}
	}
	if d.tokenSecret != "" {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.leNamespace, Name: d.tokenSecret},
			Data:       map[string][]byte{"token": []byte(tc.Token)},
		}
		if err := cp.Client.Create(ctx, sec); err != nil {
			return fmt.Errorf("fleet token Secret: %w", err)
		}
	}
	if d.pods {
		logf("fleetsim: %s N=%d: creating %d pods", d.name, tc.Nodes, tc.Sidecars())
		if err := createPods(ctx, cp, tc); err != nil {
			return fmt.Errorf("pods: %w", err)
		}
	}
	return nil
}

// createPods creates one Running pod per simulated sidecar, on its node,
// with its address (simproto.SidecarIP), labelled and annotated with the
// policy it was injected for. 16 at a time.
func createPods(ctx context.Context, cp *controlplane.ControlPlane, tc *simproto.Config) error {
	type job struct{ i, j int }
	jobs := make(chan job)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for jb := range jobs {
				ip := simproto.SidecarIP(jb.i, jb.j)
				policy := tc.PolicyName(tc.SidecarPolicy(jb.j))
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{
						Namespace: tc.Namespace, Name: fmt.Sprintf("app-%s-%d", simproto.NodeName(jb.i), jb.j),
						Labels:      map[string]string{"app": "fleetsim", v1alpha1.LabelPolicy: policy},
						Annotations: map[string]string{"heatsink.dev/inject": policy},
					},
					Spec: corev1.PodSpec{NodeName: simproto.NodeName(jb.i), Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app"}}},
				}
				err := cp.Client.Create(ctx, p)
				if err == nil {
					p.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "127.0.0.1", PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
					err = cp.Client.Status().Update(ctx, p)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range tc.Nodes {
		for j := range tc.SidecarsPerNode {
			select {
			case jobs <- job{i, j}:
			case err := <-errs:
				close(jobs)
				wg.Wait()
				return err
			}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// fmtProgress renders a progress event's counters, sorted by name.
func fmtProgress(p map[string]float64) string {
	if len(p) == 0 {
		return "no progress reported yet"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, fmt.Sprintf("%s=%g", k, p[k]))
	}
	return strings.Join(parts, " ")
}

// troubles lists the node simulator's counters that say something went
// wrong (restarts, errors, drops, losses) and are not zero: the table's
// numbers are read in their light.
func troubles(stats, progress map[string]float64) []string {
	m := stats
	if m == nil {
		m = progress
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		bad := false
		for _, w := range []string{"restart", "error", "dropped", "lost", "refused"} {
			bad = bad || strings.Contains(k, w)
		}
		if bad && m[k] > 0 {
			out = append(out, fmt.Sprintf("node simulator: %s = %g", k, m[k]))
		}
	}
	if gap := m[maxTickGap]; gap > maxTickGapNoted.Seconds() {
		out = append(out, fmt.Sprintf("node simulator: a simulated node fell %.1f s behind its traffic (%s): "+
			"the machine could not run this row in real time, and its times are late by up to that", gap, maxTickGap))
	}
	return out
}

// maxTickGap is the node simulator's stat of how far its most starved node
// fell behind (simproto.TrafficStats.MaxGap); over maxTickGapNoted it is a
// note: the simulation, not only heatsink, was late.
const (
	maxTickGap      = "max_tick_gap_seconds"
	maxTickGapNoted = time.Second
)

// waitDone waits (bounded) for the node simulator's done event, or the end
// of its output.
func waitDone(store *eventStore, bound time.Duration, seen func(simproto.Event)) {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		select {
		case e, ok := <-store.notify:
			if !ok || e.Event == simproto.EventDone {
				return
			}
			seen(e)
		case <-t.C:
			return
		}
	}
}

// lateness says when the node simulator's traffic changed more than a
// second after the schedule: a starved simulator offers its traffic late
// (it catches up), which the API rates of the phases then blur.
func lateness(readyAt time.Time, phaseAt map[string]time.Time, tc simproto.Config) []string {
	var out []string
	for _, p := range []struct {
		name string
		want time.Duration
	}{{simproto.PhaseHot, tc.HotStart}, {simproto.PhaseRest, tc.HotStart + tc.HotDuration}} {
		at, ok := phaseAt[p.name]
		if !ok {
			out = append(out, fmt.Sprintf("node simulator: no %s phase event", p.name))
			continue
		}
		if late := at.Sub(readyAt.Add(p.want)); late > time.Second {
			out = append(out, fmt.Sprintf("node simulator: %s phase began %.1f s late", p.name, late.Seconds()))
		}
	}
	return out
}

// scrapeHubPush reads the manager's routing push timing from its metrics
// at addr; nil if it serves none over plain HTTP.
func scrapeHubPush(ctx context.Context, addr string) *HubPush {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	hp, _ := parseHubPush(resp.Body)
	return hp
}

// phaseSteady names both the mark at the warm-up's midpoint and
// kube-apiserver's view from there to the hot event: the fleet at rest.
const phaseSteady = "steady"

// ProbeKey is the key the routing probe schedules.
const ProbeKey = "fleetsim:probe"

// probe makes one routing change after the phases and times its fan-out:
// it adds to the (first) policy a schedule that covers now, for ProbeKey,
// so the manager publishes a table holding it (heatsink's own path,
// whatever the design), then waits (at most 30 s) until every sidecar of
// that policy accepted that version or a later one. Its API requests come after the last /metrics
// read.
func probe(ctx context.Context, cp *controlplane.ControlPlane, tc *simproto.Config, versions *versionWatch, store *eventStore) *FanOut {
	f := &FanOut{}
	var pol v1alpha1.HotKeyPolicy
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: tc.Namespace, Name: tc.Policy}, &pol); err != nil {
		return f
	}
	start := metav1.NewTime(time.Now().Add(-time.Minute))
	pol.Spec.Schedules = append(pol.Spec.Schedules, v1alpha1.Schedule{
		Name: "fleetsim-probe", Start: &start, Duration: metav1.Duration{Duration: time.Hour},
		Keys: []string{ProbeKey}, Mitigation: v1alpha1.ScheduledMitigation{Coalesce: true},
	})
	if err := cp.Client.Update(ctx, &pol); err != nil {
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var pv *seenVersion
	for {
		if pv == nil {
			for _, v := range versions.snapshot() {
				if slices.Contains(v.Keys, ProbeKey) {
					pv = &v
					break
				}
			}
		}
		if pv != nil {
			store.mu.Lock()
			events := eventsOf(append([]sidecarEvent(nil), store.routing...), 0, tc)
			store.mu.Unlock()
			*f = probeFanOut(*pv, events)
			if f.LastReached >= sidecarsOf(0, tc) {
				return f
			}
		}
		select {
		case <-ctx.Done():
			return f
		case <-t.C:
		}
	}
}

// probeFanOut times the acceptances of version v (or, for a sidecar that
// skipped it, of its first later version) against when the orchestrator saw
// v; LastReached counts the sidecars that got there.
func probeFanOut(v seenVersion, events []sidecarEvent) FanOut {
	first := firstAccepted(events, v.Version)
	ms := make([]float64, 0, len(first))
	for _, t := range first {
		ms = append(ms, float64(t.Sub(v.At))/float64(time.Millisecond))
	}
	slices.Sort(ms)
	f := FanOut{Versions: 1, Samples: len(ms), LastVersion: v.Version, LastReached: len(ms),
		P50Ms: percentile(ms, 0.5), P99Ms: percentile(ms, 0.99)}
	if len(ms) > 0 {
		f.MaxMs = ms[len(ms)-1]
	}
	return f
}
