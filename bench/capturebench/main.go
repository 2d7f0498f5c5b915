// Command capturebench measures the node agent's packet capture
// (nodeagent/capture) on real traffic: redis-benchmark in a client network
// namespace, redis-server in a server namespace, the capture in this
// process on the observer namespace that routes between them. Each round
// runs the same load with the capture off and on (order alternating) and
// reports the client's throughput either way (their ratio: does the
// capture slow the pods' traffic?) and this process's CPU time while it
// captures (getrusage: the load generator and Redis are other processes),
// per 100,000 observed commands per second. Needs root, ip and
// redis-benchmark; prints one Markdown section.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/internal/testing/netns"
	"github.com/heatsink-dev/heatsink/nodeagent/capture"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds (each: capture off and on)")
	requests := flag.Int("n", 400000, "requests per redis-benchmark run (SET and GET each)")
	clients := flag.Int("c", 8, "redis-benchmark connections")
	pipeline := flag.Int("P", 1, "redis-benchmark pipeline depth")
	sample := flag.Uint("sample", 1, "capture one connection in N")
	keyspace := flag.Int("r", 100000, "redis-benchmark key space (random keys)")
	cluster := flag.Bool("cluster", false, "count as for a Redis Cluster target: a slot map in which the server serves every slot (each command's slot looked up)")
	replies := flag.Bool("replies", false, "measure following replies instead: the capture with replies off, at the default reply sampling and on every connection, side by side")
	trials := flag.Int("reaction", 0, "then time a key from cold to 1.5 × its threshold to the manager's view, captured and through a sidecar, side by side, this many trials")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*rounds, *requests, *clients, *pipeline, *keyspace, uint32(*sample), *cluster, *replies, *trials); err != nil {
		fmt.Fprintln(os.Stderr, "capturebench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func cpuSeconds() float64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func run(rounds, requests, clients, pipeline, keyspace int, sample uint32, cluster, replies bool, trials int) error {
	if err := netns.Available(); err != nil {
		return err
	}
	for _, tool := range []string{"redis-server", "redis-benchmark"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("needs %s", tool)
		}
	}
	fmt.Fprintln(os.Stderr, "bench: capture: building the namespaces")
	n, err := netns.New()
	if err != nil {
		return err
	}
	defer n.Close()
	// Interrupted (a timeout's SIGTERM): remove the namespaces all the same.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		n.Close()
		os.Exit(1)
	}()
	fmt.Fprintln(os.Stderr, "bench: capture: starting redis-server")
	stop, err := netns.StartRedis(n.Server, netns.ServerIP, 6379)
	if err != nil {
		return err
	}
	defer stop()
	server := netip.MustParseAddrPort(netns.ServerIP + ":6379")
	bench := func() (float64, error) {
		start := time.Now()
		cmd := netns.Command(context.Background(), n.Client, "redis-benchmark", "-h", netns.ServerIP, "-p", "6379",
			"-c", fmt.Sprint(clients), "-P", fmt.Sprint(pipeline), "-n", fmt.Sprint(requests), "-r", fmt.Sprint(keyspace),
			"-t", "set,get", "-q")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("redis-benchmark: %v: %s", err, out)
		}
		return float64(2*requests) / time.Since(start).Seconds(), nil
	}
	fmt.Fprintln(os.Stderr, "bench: capture: waiting for redis-server")
	// Wait for Redis to listen (redis-benchmark would retry forever).
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := netns.Dialer(n.Client, "")(ctx, "tcp", server.String())
		cancel()
		if err == nil {
			conn.Close()
			break
		}
		if i == 200 {
			return fmt.Errorf("redis-server not answering: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rounds > 0 && replies {
		if err := costReplies(bench, n, server, rounds, requests, clients, pipeline, keyspace, sample); err != nil {
			return err
		}
	} else if rounds > 0 {
		if err := cost(bench, n, server, rounds, requests, clients, pipeline, keyspace, sample, cluster); err != nil {
			return err
		}
	}
	if trials > 0 {
		return reaction(n, server, trials, sample)
	}
	return nil
}

// cost runs the rounds of the load with the capture off and on and prints
// the table of throughput and CPU.
func cost(bench func() (float64, error), n *netns.Net, server netip.AddrPort, rounds, requests, clients, pipeline, keyspace int, sample uint32, cluster bool) (err error) {

	fmt.Println("### Packet capture (node agent, pods without a sidecar)")
	fmt.Println()
	fmt.Printf("redis-benchmark SET+GET on %d random keys, %d connections, pipeline %d, %d requests per run, from a client namespace through an observer namespace to redis-server; the capture (AF_PACKET, in-kernel filter, sampling 1 in %d) in the observer on every interface. `cpu %%` is the capturing process's CPU over the run (getrusage), `per 100k` that divided by observed (parsed) commands/s ÷ 100,000, `per 100k sent` divided by the commands/s the client sent (with sampling, most are filtered out in the kernel; target ≤ 5 %% of one core). `ratio` is client throughput with the capture over without it in the same round (target ≈ 1: the capture never blocks traffic).\n\n", keyspace, clients, pipeline, requests, sample)
	if cluster {
		fmt.Println("Counted as for a Redis Cluster target: a slot map in which this server serves every slot, so each command's slot is computed and looked up (and every command still counts).")
		fmt.Println()
	}
	fmt.Println("| round | req/s off | req/s on | ratio | observed cmd/s | cpu % | cpu % per 100k observed | cpu % per 100k sent | kernel drops |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var worstPer float64
	var ratios, idle []float64
	for r := range rounds {
		var off, on, obsRate, cpuPct float64
		var drops uint64
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, capOn := range order {
			if !capOn {
				if off, err = bench(); err != nil {
					return err
				}
				continue
			}
			m, err := measure(bench, n, server, sample, 0, cluster)
			if err != nil {
				return err
			}
			on, obsRate, cpuPct, drops = m.rate, m.observed, m.cpuPct, m.stats.KernelDrops
			idle = append(idle, m.idlePct)
		}
		per := cpuPct / (obsRate / 1e5)
		worstPer = max(worstPer, per)
		ratios = append(ratios, on/off)
		fmt.Printf("| %d | %.0f | %.0f | %.3f | %.0f | %.1f | %.2f | %.2f | %d |\n", r+1, off, on, on/off, obsRate, cpuPct, per, cpuPct/(on/1e5), drops)
	}
	var rs []string
	for _, r := range ratios {
		rs = append(rs, fmt.Sprintf("%.3f", r))
	}
	var is []string
	for _, i := range idle {
		is = append(is, fmt.Sprintf("%.2f", i))
	}
	fmt.Printf("\nWorst CPU per 100,000 observed commands/s: **%.2f %% of one core** (target ≤ 5 %%); throughput ratios on/off: %s; idle (scope set, 1 s before the traffic): %s %% of one core.\n\n", worstPer, strings.Join(rs, ", "), strings.Join(is, ", "))
	return nil
}

// measured is one load with the capture on.
type measured struct {
	rate, observed, cpuPct, idlePct float64
	stats                           capture.Stats
}

// measure runs the load once with the capture on (its replies followed on
// one captured connection in replyEvery; 0: none): the client's rate, the
// commands observed per second, this process's CPU over the run, and its
// CPU idle (the scope set, 1 s before the traffic).
func measure(bench func() (float64, error), n *netns.Net, server netip.AddrPort, sample, replyEvery uint32, cluster bool) (m measured, err error) {
	c, err := openCapture(n, sample, replyEvery)
	if err != nil {
		return m, err
	}
	target := capture.Target{Policy: "bench/p", Namespace: "bench", Endpoints: []netip.AddrPort{server}}
	if cluster {
		target.Slots = []capture.SlotRange{{Start: 0, End: 16383, Master: server}}
	}
	if err := c.SetScope(capture.Scope{
		Targets: []capture.Target{target},
		Pods:    map[netip.Addr]string{netip.MustParseAddr(netns.ClientIP): "bench"},
	}); err != nil {
		return m, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = c.Run(ctx, func(string, []sidecarlink.Entry) {})
		close(done)
	}()
	defer func() { cancel(); <-done }()
	for c.Stats().Targets == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	// Idle: the scope set, no traffic yet (the wake-ups alone).
	cpuIdle, tIdle := cpuSeconds(), time.Now()
	time.Sleep(time.Second)
	m.idlePct = 100 * (cpuSeconds() - cpuIdle) / time.Since(tIdle).Seconds()
	// Observed: commands parsed (counted or not: a key over the
	// per-interval key budget is parsed and dropped).
	cpu0, t0, s0 := cpuSeconds(), time.Now(), c.Stats()
	if m.rate, err = bench(); err != nil {
		return m, err
	}
	time.Sleep(300 * time.Millisecond) // the last flush
	wall := time.Since(t0).Seconds()
	cpu := cpuSeconds() - cpu0
	m.stats = c.Stats()
	m.observed = float64(m.stats.Commands-s0.Commands) / wall
	m.cpuPct = 100 * cpu / wall
	return m, nil
}

// openCapture opens a capture on every interface of the observer
// namespace (the bench's node).
func openCapture(n *netns.Net, sample, replyEvery uint32) (c *capture.Capture, err error) {
	err = netns.Do(n.Observer, func() (err error) {
		c, err = capture.Open(capture.Config{SampleEvery: sample, ReplySampleEvery: replyEvery})
		return err
	})
	return c, err
}
