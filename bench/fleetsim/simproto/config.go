// Package simproto is the contract between the fleet simulator's
// orchestrator (bench/fleetsim/cmd/fleetsim) and a design's node simulator
// (one process running N simulated nodes and 10 × N simulated sidecars):
// the flags a node simulator takes (Config), the JSON lines it prints on
// stdout (Event, Writer) and the traffic it offers (Run), so that every
// design is driven by the same flags and fed the same traffic.
//
// It imports the standard library only: hack/bench.d/50-fleet.sh copies it
// into a checkout of an older heatsink (the legacy design) next to that
// design's node simulator, whose module does not know this one.
package simproto

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Config is what a node simulator is told. The orchestrator passes every
// field as a flag (Args); a design ignores what it does not use (the legacy
// design has no fleet manager address, the fleet design no kubeconfig).
type Config struct {
	// Nodes is the number of simulated nodes, SidecarsPerNode the number of
	// simulated sidecars (application pods) on each.
	Nodes, SidecarsPerNode int
	// Namespace and Policy name the HotKeyPolicy the sidecars were injected
	// for.
	Namespace, Policy string
	// Policies is how many policies there are (PolicyName): sidecar j of
	// every node is injected for policy j mod Policies, and each policy has
	// a viral key and a counter of its own (ViralKeyOf, CounterKeyOf), each
	// at ViralRate and CounterRate over its own sidecars. 1, the default,
	// is Policy alone.
	Policies int
	// Kubeconfig reaches the API server (the legacy design's node agents and
	// sidecars talk to it).
	Kubeconfig string
	// ManagerFleet is the elected manager's fleet address and Token its
	// bearer token (the fleet design's node agents use them).
	ManagerFleet, Token string

	// BackgroundRate is the Zipf background's operations per second over
	// all nodes (reads and writes, WriteFraction of them writes), drawn
	// from BackgroundKeys keys with exponent ZipfS.
	BackgroundRate float64
	BackgroundKeys int
	ZipfS          float64
	WriteFraction  float64
	// HotStart is when, after ready, the hot event starts; HotDuration how
	// long it lasts. During it, ViralKey is read at ViralRate and
	// CounterKey written at CounterRate (operations per second over all
	// nodes), spread evenly over every sidecar.
	HotStart, HotDuration  time.Duration
	ViralKey, CounterKey   string
	ViralRate, CounterRate float64
	// HotNodes, if between 1 and Nodes, concentrates the viral key and the
	// counter on that many nodes (every Nodes/HotNodes-th, from node 0),
	// still spread evenly over their sidecars; 0 spreads them over every
	// node. The background is spread over every node either way.
	HotNodes int
	// Duration is the whole run after ready: warm-up (background only)
	// until HotStart, the hot event, then rest (no traffic) until Duration.
	Duration time.Duration
	// StartTimeout bounds the start-up (nodes and sidecars up and synced):
	// a simulator that is not ready by then prints what it reached and
	// exits.
	StartTimeout time.Duration
	// Seed seeds the background's random keys.
	Seed int64
}

// Defaults are the benchmark's default traffic: a background whose busiest
// key stays well under the default read threshold (5,000/s), a viral key at
// 2 × that threshold and a counter at 2 × the default write threshold
// (1,000/s).
func Defaults() Config {
	return Config{
		Nodes: 10, SidecarsPerNode: 10, Namespace: "fleet", Policy: "catalogue", Policies: 1,
		BackgroundRate: 20000, BackgroundKeys: 100000, ZipfS: 1.1, WriteFraction: 0.1,
		HotStart: 10 * time.Second, HotDuration: 20 * time.Second,
		ViralKey: "product:viral", CounterKey: "likes:counter",
		ViralRate: 10000, CounterRate: 2000,
		Duration: 45 * time.Second, StartTimeout: 5 * time.Minute, Seed: 1,
	}
}

// Bind registers the flags on fs, with c's values as defaults.
func (c *Config) Bind(fs *flag.FlagSet) {
	fs.IntVar(&c.Nodes, "nodes", c.Nodes, "simulated nodes")
	fs.IntVar(&c.SidecarsPerNode, "sidecars-per-node", c.SidecarsPerNode, "simulated sidecars on each node")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "namespace of the HotKeyPolicy")
	fs.StringVar(&c.Policy, "policy", c.Policy, "name of the HotKeyPolicy the sidecars follow")
	fs.IntVar(&c.Policies, "policies", c.Policies, "policies: sidecar j of each node is injected for policy j mod this (--policy, then --policy-2, ...), each with its own viral key and counter")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig of the API server (designs whose nodes use it)")
	fs.StringVar(&c.ManagerFleet, "manager-fleet", c.ManagerFleet, "the elected manager's fleet address (designs whose nodes stream to it)")
	fs.StringVar(&c.Token, "token", c.Token, "bearer token of the manager's fleet endpoint")
	fs.Float64Var(&c.BackgroundRate, "background-rate", c.BackgroundRate, "Zipf background operations per second over all nodes")
	fs.IntVar(&c.BackgroundKeys, "background-keys", c.BackgroundKeys, "distinct keys of the background")
	fs.Float64Var(&c.ZipfS, "zipf-s", c.ZipfS, "Zipf exponent of the background (> 1)")
	fs.Float64Var(&c.WriteFraction, "write-fraction", c.WriteFraction, "fraction of the background that are writes")
	fs.DurationVar(&c.HotStart, "hot-start", c.HotStart, "when, after ready, the hot event starts")
	fs.DurationVar(&c.HotDuration, "hot-duration", c.HotDuration, "how long the hot event lasts")
	fs.StringVar(&c.ViralKey, "viral-key", c.ViralKey, "the key read by every sidecar during the hot event")
	fs.Float64Var(&c.ViralRate, "viral-rate", c.ViralRate, "reads per second of the viral key over all nodes")
	fs.StringVar(&c.CounterKey, "counter-key", c.CounterKey, "the counter written by every sidecar during the hot event")
	fs.Float64Var(&c.CounterRate, "counter-rate", c.CounterRate, "writes per second of the counter over all nodes")
	fs.IntVar(&c.HotNodes, "hot-nodes", c.HotNodes, "concentrate the viral key and the counter on this many nodes (every nodes/hot-nodes-th); 0: every node")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "the whole run after ready (warm-up, hot event, rest)")
	fs.DurationVar(&c.StartTimeout, "start-timeout", c.StartTimeout, "bound on the start-up before ready")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed of the background's random keys")
}

// Args renders c as the flags Bind reads.
func (c *Config) Args() []string {
	f := func(v float64) string { return fmt.Sprintf("%g", v) }
	args := []string{
		"--nodes", fmt.Sprint(c.Nodes), "--sidecars-per-node", fmt.Sprint(c.SidecarsPerNode),
		"--namespace", c.Namespace, "--policy", c.Policy, "--policies", fmt.Sprint(c.Policies),
		"--kubeconfig", c.Kubeconfig, "--manager-fleet", c.ManagerFleet, "--token", c.Token,
		"--background-rate", f(c.BackgroundRate), "--background-keys", fmt.Sprint(c.BackgroundKeys),
		"--zipf-s", f(c.ZipfS), "--write-fraction", f(c.WriteFraction),
		"--hot-start", c.HotStart.String(), "--hot-duration", c.HotDuration.String(),
		"--viral-key", c.ViralKey, "--viral-rate", f(c.ViralRate),
		"--counter-key", c.CounterKey, "--counter-rate", f(c.CounterRate),
		"--duration", c.Duration.String(), "--start-timeout", c.StartTimeout.String(),
		"--seed", fmt.Sprint(c.Seed),
	}
	if c.HotNodes > 0 { // only when set: a simulator built before the flag still runs
		args = append(args, "--hot-nodes", fmt.Sprint(c.HotNodes))
	}
	return args
}

// MaxSidecarsPerNode bounds SidecarsPerNode so that SidecarIP stays in one
// octet.
const MaxSidecarsPerNode = 250

// MaxNodes bounds Nodes so that SidecarIP stays in 127.0.0.0/8.
const MaxNodes = 60000

// Validate says what is wrong with c, all of it at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		bad("--nodes %d: want 1..%d", c.Nodes, MaxNodes)
	}
	if c.SidecarsPerNode < 1 || c.SidecarsPerNode > MaxSidecarsPerNode {
		bad("--sidecars-per-node %d: want 1..%d", c.SidecarsPerNode, MaxSidecarsPerNode)
	}
	if c.Namespace == "" || c.Policy == "" {
		bad("--namespace and --policy are required")
	}
	if c.Policies < 1 || c.Policies > c.SidecarsPerNode {
		bad("--policies %d: want 1..--sidecars-per-node (%d), so that every node has every policy's sidecars", c.Policies, c.SidecarsPerNode)
	}
	for name, r := range map[string]float64{"--background-rate": c.BackgroundRate, "--viral-rate": c.ViralRate, "--counter-rate": c.CounterRate} {
		if r < 0 || r > MaxRate {
			bad("%s %g: want 0..%g operations per second", name, r, float64(MaxRate))
		}
	}
	if c.HotNodes < 0 || c.HotNodes > c.Nodes {
		bad("--hot-nodes %d: want 0..--nodes (%d)", c.HotNodes, c.Nodes)
	}
	if c.BackgroundKeys < 1 {
		bad("--background-keys %d: want at least 1", c.BackgroundKeys)
	}
	if c.ZipfS <= 1 {
		bad("--zipf-s %g: want > 1", c.ZipfS)
	}
	if c.WriteFraction < 0 || c.WriteFraction > 1 {
		bad("--write-fraction %g: want 0..1", c.WriteFraction)
	}
	if c.ViralKey == "" || c.CounterKey == "" || c.ViralKey == c.CounterKey {
		bad("--viral-key and --counter-key must be two different non-empty keys")
	}
	if c.HotStart < 0 || c.HotDuration <= 0 || c.HotStart+c.HotDuration > c.Duration {
		bad("phases: want 0 <= --hot-start (%s), 0 < --hot-duration (%s), hot-start + hot-duration <= --duration (%s)", c.HotStart, c.HotDuration, c.Duration)
	}
	if c.Duration <= 0 || c.Duration > MaxDuration {
		bad("--duration %s: want (0, %s]", c.Duration, MaxDuration)
	}
	if c.StartTimeout <= 0 || c.StartTimeout > MaxDuration {
		bad("--start-timeout %s: want (0, %s]", c.StartTimeout, MaxDuration)
	}
	return errors.Join(errs...)
}

// MaxRate and MaxDuration bound the load a simulator offers: every load
// loop is bounded in rate and time.
const (
	MaxRate     = 1_000_000
	MaxDuration = time.Hour
)

// Sidecars is the number of simulated sidecars.
func (c *Config) Sidecars() int { return c.Nodes * c.SidecarsPerNode }

// PolicyRef is "<namespace>/<name>" of the first policy, as the wire names
// it.
func (c *Config) PolicyRef() string { return c.PolicyRefOf(0) }

// PolicyName is the name of policy k: Policy for the first, then
// Policy-2, Policy-3, ...
func (c *Config) PolicyName(k int) string {
	if k == 0 {
		return c.Policy
	}
	return fmt.Sprintf("%s-%d", c.Policy, k+1)
}

// PolicyRefOf is "<namespace>/<name>" of policy k.
func (c *Config) PolicyRefOf(k int) string { return c.Namespace + "/" + c.PolicyName(k) }

// SidecarPolicy is the policy sidecar j of every node was injected for.
func (c *Config) SidecarPolicy(j int) int { return j % max(c.Policies, 1) }

// ViralKeyOf and CounterKeyOf are policy k's hot keys: ViralKey and
// CounterKey for the first, then with the policy's number appended.
func (c *Config) ViralKeyOf(k int) string { return numbered(c.ViralKey, k) }

// CounterKeyOf: see ViralKeyOf.
func (c *Config) CounterKeyOf(k int) string { return numbered(c.CounterKey, k) }

func numbered(s string, k int) string {
	if k == 0 {
		return s
	}
	return fmt.Sprintf("%s-%d", s, k+1)
}

// NodeName is the name of simulated node i.
func NodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// NodeIP is a loopback address for node i's agent (127.0.0.0/8, distinct
// for every node and from every SidecarIP), so that a node agent restarted
// during a run binds its address again without racing other sockets for
// the port.
func NodeIP(i int) string {
	n := i + 1
	return fmt.Sprintf("127.%d.%d.254", n>>8&0xff, n&0xff)
}

// SidecarIP is a loopback address for sidecar j of node i (127.0.0.0/8,
// distinct for every sidecar while i < MaxNodes and j <
// MaxSidecarsPerNode), for designs whose node agents tell pods apart by
// source address: a simulated sidecar binds it before sending.
func SidecarIP(i, j int) string {
	n := i + 1 // never 127.0.0.x, where real servers listen
	return fmt.Sprintf("127.%d.%d.%d", n>>8&0xff, n&0xff, j+1)
}
