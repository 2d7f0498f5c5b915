// Command fleetsim is the fleet simulator of `make bench`: for each fleet size and each design it runs a real kube-apiserver and
// etcd, the design's real `heatsink manager` as a process and the design's
// node simulator as another (N simulated nodes running the design's
// node-agent code, 10 × N simulated sidecars), drives a warm-up, a hot event
// spread evenly over every node and a rest, and prints one Markdown table:
// detection, the API server's requests by verb and resource, routing
// fan-out, and CPU and memory of the manager, the node simulator,
// kube-apiserver and etcd. The raw numbers go to a JSON file.
//
// Designs: "legacy" (today's: per-node HotKeyReports, per-sidecar ConfigMap
// watches; built from a git ref by hack/bench.d/50-fleet.sh) and "fleet"
// (node agents stream to the elected manager). A design is a heatsink binary
// and a node simulator binary speaking package simproto's contract.
//
// Run it from the repository (the control plane harness finds the CRDs and
// bin/k8s from the working directory).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
)

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func main() { os.Exit(run()) }

func run() int {
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)
	nodesFlag := fs.String("nodes", "10,100,1000", "fleet sizes (simulated nodes), comma-separated")
	designsFlag := fs.String("designs", "legacy,fleet", "designs to run at each size, comma-separated: legacy, fleet")
	bins := map[string]*[2]string{"legacy": {}, "fleet": {}}
	margs := map[string]*string{}
	nargs := map[string]*string{}
	for _, d := range []string{"legacy", "fleet"} {
		fs.StringVar(&bins[d][0], d+"-heatsink", "", "the "+d+" design's heatsink binary (its manager is run)")
		fs.StringVar(&bins[d][1], d+"-nodesim", "", "the "+d+" design's node simulator binary (package simproto's flags and events)")
		def := ""
		if d == "fleet" {
			// The fleet server plain (no webhook certificate here); its
			// token comes from the Secret the orchestrator creates. The
			// policy names its (refusing) Redis by address, which the
			// manager connects to only when raw addresses are allowed.
			def = "--fleet-bind-address={fleetAddr} --fleet-tls=false --metrics-secure=false --allow-raw-target-addresses"
		}
		margs[d] = fs.String(d+"-manager-args", def, "extra manager arguments, space-separated; {fleetAddr}, {token} and {tokenFile} are the run's fleet endpoint and bearer token")
		nargs[d] = fs.String(d+"-nodesim-args", "", "extra node simulator arguments, space-separated (same placeholders)")
	}
	podsFlag := fs.String("pods", "fleet", "designs whose runs create a Pod object per simulated sidecar (node, address, policy label) before the manager starts")
	tokenSecret := fs.String("fleet-token-secret", "heatsink-fleet-token", "for the fleet design, a Secret created in the manager's namespace before it starts, holding the run's token under key \"token\" (the manager's --fleet-token-secret default); empty: none")
	t := simproto.Defaults()
	warmup := fs.Duration("warmup", 20*time.Second, "warm-up: background only (its second half is measured as the fleet at rest)")
	hot := fs.Duration("hot", 20*time.Second, "the hot event")
	rest := fs.Duration("rest", 15*time.Second, "rest: no traffic")
	fs.Float64Var(&t.BackgroundRate, "background-rate", t.BackgroundRate, "Zipf background ops/s over all nodes")
	fs.Float64Var(&t.ViralRate, "viral-rate", t.ViralRate, "viral key reads/s over all nodes")
	fs.IntVar(&t.HotNodes, "hot-nodes", t.HotNodes, "concentrate the viral key and the counter on this many nodes of each size (every nodes/hot-nodes-th); 0: every node")
	fs.Float64Var(&t.CounterRate, "counter-rate", t.CounterRate, "counter writes/s over all nodes")
	fs.Int64Var(&t.Seed, "seed", t.Seed, "seed of the background")
	fs.DurationVar(&t.StartTimeout, "start-timeout", 4*time.Minute, "bound on a node simulator's start-up")
	spn := fs.Int("sidecars-per-node", 10, "simulated sidecars per node")
	fs.IntVar(&t.Policies, "policies", 1, "HotKeyPolicies, each with its own viral key and counter; sidecar j of each node is injected for policy j mod this (fleet design only: the legacy node simulator follows one)")
	reads := fs.Int64("reads-threshold", 5000, "the policy's reads/s threshold")
	writes := fs.Int64("writes-threshold", 1000, "the policy's writes/s threshold")
	sustain := fs.Duration("sustain-for", time.Second, "the policy's sustainFor")
	managerTimeout := fs.Duration("manager-timeout", 2*time.Minute, "bound on the manager publishing its first routing table")
	maxRSS := fs.Int64("max-rss-mb", 12288, "stop a run when the manager, node simulator, kube-apiserver and etcd together use more (MiB)")
	jsonOut := fs.String("json", "fleetsim.json", "file for the raw numbers")
	work := fs.String("work", "", "directory for kubeconfigs and logs (default: a temporary directory, removed at the end)")
	noLE := fs.Bool("no-leader-election", false, "run the manager with --leader-elect=false (the row notes it): where the cores are too loaded for it to renew its lease")
	hold := fs.Duration("hold", 0, "keep every process of a run up this long after the routing probe (to profile the probe's fan-out: see the README)")
	procs := fs.Int("nodesim-procs", 8, "GOMAXPROCS of every design's node simulator and its children (0: Go's default, the cores); see the README")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	t.HotStart, t.HotDuration, t.Duration = *warmup, *hot, *warmup+*hot+*rest
	t.SidecarsPerNode = *spn

	var sizes []int
	for f := range strings.SplitSeq(*nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > simproto.MaxNodes {
			logf("fleetsim: --nodes: %q is not a node count in 1..%d", f, simproto.MaxNodes)
			return 2
		}
		sizes = append(sizes, n)
	}
	pods := strings.Split(*podsFlag, ",")
	var designs []design
	for name := range strings.SplitSeq(*designsFlag, ",") {
		name = strings.TrimSpace(name)
		b, ok := bins[name]
		if !ok {
			logf("fleetsim: --designs: unknown design %q (legacy, fleet)", name)
			return 2
		}
		for i, flagName := range []string{"-heatsink", "-nodesim"} {
			if st, err := os.Stat(b[i]); b[i] == "" || err != nil || st.IsDir() {
				logf("fleetsim: design %s: --%s%s %q is not a binary", name, name, flagName, b[i])
				return 2
			}
		}
		if name == "legacy" && t.Policies > 1 {
			logf("fleetsim: --policies %d: the legacy node simulator follows one policy; run the legacy design with --policies 1", t.Policies)
			return 2
		}
		dd := design{name: name, heatsink: b[0], nodesim: b[1],
			managerArgs: strings.Fields(*margs[name]), nodesimArgs: strings.Fields(*nargs[name]), pods: slices.Contains(pods, name)}
		if name == "fleet" {
			dd.tokenSecret = *tokenSecret
		}
		designs = append(designs, dd)
	}
	check := t
	check.Nodes = slices.Max(sizes)
	if err := check.Validate(); err != nil {
		logf("fleetsim: %v", err)
		return 2
	}

	ctrl.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	raiseNoFile()
	if *work == "" {
		dir, err := os.MkdirTemp("", "fleetsim-")
		if err != nil {
			logf("fleetsim: %v", err)
			return 1
		}
		defer os.RemoveAll(dir)
		*work = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s := settings{sidecarsPerNode: *spn, traffic: t, reads: *reads, writes: *writes, sustainFor: *sustain,
		managerTimeout: *managerTimeout, maxRSS: *maxRSS << 20, work: *work, leNamespace: "heatsink-system", hold: *hold, noLeaderElection: *noLE, nodesimProcs: *procs}
	var results []*Result
	for _, n := range sizes {
		for _, d := range designs {
			if ctx.Err() != nil {
				break
			}
			r := runOne(ctx, d, n, s)
			results = append(results, r)
			logf("fleetsim: %s N=%d: %s; viral %s, counter %s", d.name, n, r.Reached, detection(r.Viral, true), detection(r.Counter, true))
			for _, note := range r.Notes {
				logf("fleetsim: %s N=%d: %s", d.name, n, note)
			}
			if err := writeJSON(*jsonOut, results); err != nil {
				logf("fleetsim: %v", err)
			}
		}
	}
	le := "leader election on"
	for _, r := range results {
		if !r.LeaderElection {
			le = "leader election off in some runs (see the notes)"
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	writeReport(os.Stdout, params{reads: *reads, writes: *writes, sustainFor: *sustain, viralRate: t.ViralRate, counterRate: t.CounterRate,
		backgroundRate: t.BackgroundRate, warmup: *warmup, hot: *hot, rest: *rest, sidecarsPerNode: *spn,
		policies: t.Policies, hotNodes: t.HotNodes, cores: runtime.NumCPU(), load: strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "), leaderElection: le}, results)
	if ctx.Err() != nil {
		return 1
	}
	return 0
}

func writeJSON(path string, results []*Result) error {
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// raiseNoFile raises the soft limit on open files to the hard limit, for
// this process and the processes it starts (10,000 simulated sidecars each
// hold sockets). Setting it explicitly also stops Go from restoring the
// original soft limit in the children.
func raiseNoFile() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		logf("fleetsim: raising the open-files limit: %v", err)
	}
	logf("fleetsim: open-files limit %d", l.Cur)
}
