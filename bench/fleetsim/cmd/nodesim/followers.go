package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
	"github.com/heatsink-dev/heatsink/dataplane/watch"
	"github.com/heatsink-dev/heatsink/routing"
)

// The routing followers (10 × N dataplane/watch.Watchers, one per simulated
// sidecar, each following its node agent's routing stream from the
// sidecar's address)
// run in a child process of the node simulator: each holds a TCP
// connection, and the agents hold the other end, so in one process 10,000
// of them would need 20,000 descriptors next to the agents' own, over this
// machine's hard open-files limit (20,000; raising it needs
// CAP_SYS_RESOURCE). The child is this binary with --follow: it reads the
// agents' routing addresses from stdin, one line per node, and prints
// simproto routing and progress lines, which the parent passes on.

// followMain is the child's main.
func followMain(c simproto.Config, o *options) int {
	startRate := o.startRate
	raiseNoFile()
	r := o.nodes(c)
	in := bufio.NewReader(os.Stdin)
	addrs, err := readAddrs(in, r.Count)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodesim --follow:", err)
		return 2
	}
	out := simproto.NewWriter(os.Stdout)
	defer out.Close()
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.StartTimeout+c.Duration+simproto.Linger+2*time.Minute)
	defer cancel()

	f := &followers{c: c, out: out}
	// The followers only react to what the agents send: how late this
	// process's timers fire is how long a routing line waits for a core.
	go f.lag.Run(ctx.Done(), 10*time.Millisecond)
	go func() {
		// The parent writes trafficStartLine when the traffic starts: the
		// lag counts from there, not during the start-up.
		for {
			line, err := in.ReadString('\n')
			if err != nil {
				return
			}
			if strings.TrimSpace(line) == trafficStartLine {
				f.lag.Reset()
			}
		}
	}()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				out.Progress(time.Now(), f.stats())
			}
		}
	}()
	var wg sync.WaitGroup
	t0 := time.Now()
	nodeRate := startRate / float64(c.SidecarsPerNode)
	for k, addr := range addrs {
		i := r.First + k
		if pace(ctx, t0, k, nodeRate) != nil {
			break
		}
		// Each node starts its own sidecars' watchers from its own
		// goroutine.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range c.SidecarsPerNode {
				if err := f.start(ctx, &wg, i, j, addr); err != nil {
					f.errors.Add(1)
					fmt.Fprintf(os.Stderr, "nodesim --follow: sidecar %d/%d: %v\n", i, j, err)
				}
			}
		}()
	}
	<-ctx.Done()
	wg.Wait()
	out.Progress(time.Now(), f.stats())
	return 0
}

// readAddrs reads n "host:port" lines, and no further.
func readAddrs(r *bufio.Reader, n int) ([]string, error) {
	var addrs []string
	for len(addrs) < n {
		line, err := r.ReadString('\n')
		if a := strings.TrimSpace(line); a != "" {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("agent address %d: %q: %w", len(addrs), a, err)
			}
			addrs = append(addrs, a)
		}
		if err != nil {
			break
		}
	}
	if len(addrs) < n {
		return nil, fmt.Errorf("read %d agent addresses on stdin, want %d", len(addrs), n)
	}
	return addrs, nil
}

// trafficStartLine tells the followers' child, after the addresses, that
// the traffic starts.
const trafficStartLine = "traffic"

// trafficStarted tells the child that the traffic starts.
func (fc *followerChild) trafficStarted() {
	_, _ = io.WriteString(fc.stdin, trafficStartLine+"\n")
}

// followers are the child's watchers and their counters.
type followers struct {
	c   simproto.Config
	out *simproto.Writer

	started, synced, tables, rejected, requestErrors, errors atomic.Int64
	lag                                                      simproto.LagProbe
}

// followerTimerLag prefixes the followers' LagProbe counters.
const followerTimerLag = "follower_timer_lag"

func (f *followers) stats() map[string]float64 {
	m := map[string]float64{
		"followers_started": float64(f.started.Load()), "followers_synced": float64(f.synced.Load()),
		"follower_tables": float64(f.tables.Load()), "follower_tables_refused": float64(f.rejected.Load()),
		"follower_request_errors": float64(f.requestErrors.Load()), "follower_start_errors": float64(f.errors.Load()),
	}
	for k, v := range f.lag.Stats(followerTimerLag) {
		m[k] = v
	}
	return m
}

// start starts sidecar j of node i's watcher, following the agent at
// addr from the sidecar's address (the agent serves a pod's policy's table
// only to that pod's address).
func (f *followers) start(ctx context.Context, wg *sync.WaitGroup, i, j int, addr string) error {
	ip := net.ParseIP(simproto.SidecarIP(i, j))
	hc := &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: watch.AgentDialTimeout, LocalAddr: &net.TCPAddr{IP: ip}}).DialContext,
		MaxIdleConnsPerHost: 1,
		ForceAttemptHTTP2:   false,
	}}
	first := true
	w, err := watch.New(watch.Options{
		Agent: addr, HTTPClient: hc, Namespace: f.c.Namespace, Policy: f.c.PolicyName(f.c.SidecarPolicy(j)),
		Log: countingLogger(&f.requestErrors),
		// Called in version order, never concurrently for one watcher.
		OnTable: func(t *routing.Table) {
			at := time.Now()
			if first {
				first = false
				f.synced.Add(1)
			}
			f.tables.Add(1)
			keys := make([]string, len(t.Entries))
			for k, e := range t.Entries {
				keys[k] = e.Key
			}
			f.out.Routing(i, j, t.Version, keys, at)
		},
		OnReject: func(watch.Source, error) { f.rejected.Add(1) },
	})
	if err != nil {
		return err
	}
	f.started.Add(1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		growStack(watcherStackKiB)
		_ = w.Run(ctx)
		hc.CloseIdleConnections()
	}()
	return nil
}

// watcherStackKiB is the stack a watcher's goroutine starts with here.
// A sidecar's watcher grows its goroutine's stack once, the first time it
// parses a table with entries (encoding/json goes deeper than for the empty
// first table), on the sidecar's own CPU. Here all 10,000 would grow at
// the same moment, the first fan-out of the hot event, on the two cores
// the agents need (a profile of the child then: 300 of 570 ms in
// runtime.newstack), so the simulator grows them before the watcher
// starts; GODEBUG=gcshrinkstackoff=1 (startFollowers) keeps them grown.
const watcherStackKiB = 32

// growStack grows the calling goroutine's stack by about kib KiB: each
// call's frame holds a KiB the compiler cannot drop.
//
//go:noinline
func growStack(kib int) byte {
	var pad [1024]byte
	if kib > 1 {
		pad[kib%len(pad)] = growStack(kib - 1)
	}
	return pad[kib%len(pad)]
}

// countingLogger counts the watcher's "request failed" lines (logged at V(1):
// the agent away, or refusing the sidecar) and prints nothing.
func countingLogger(n *atomic.Int64) logr.Logger {
	return funcr.New(func(_, args string) {
		if strings.Contains(args, "node agent request failed") {
			n.Add(1)
		}
	}, funcr.Options{Verbosity: 1})
}

// followerChild is the parent's handle on the child.
type followerChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error

	mu     sync.Mutex
	synced map[int]bool // sidecar index → accepted a first table
	stats  map[string]float64
	bad    int
}

// startFollowers starts the child with c's flags and the agents'
// addresses on its stdin, and passes its routing lines on to out.
func startFollowers(c simproto.Config, o *options, r simproto.Range, addrs []string, out *simproto.Writer) (*followerChild, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"--follow", "--start-rate", fmt.Sprint(o.startRate), "--range-first", fmt.Sprint(r.First), "--range-count", fmt.Sprint(r.Count)}
	if o.followPprof != "" {
		args = append(args, "--pprof", o.followPprof)
	}
	args = append(args, c.Args()...)
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Each watcher parses every table on its own goroutine, whose stack
	// grows for encoding/json and is shrunk again by the next GC: a profile
	// of the hot event's fan-out found 45 % of the child's CPU copying
	// stacks (10,000 goroutines growing at once, on the cores the agents
	// need). A sidecar has one watcher and pays that once per table; here
	// the stacks stay grown (10,000 × a few KiB).
	cmd.Env = append(os.Environ(), "GODEBUG=gcshrinkstackoff=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the routing followers: %w", err)
	}
	if _, err := io.WriteString(stdin, strings.Join(addrs, "\n")+"\n"); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("giving the routing followers the agents' addresses: %w", err)
	}
	fc := &followerChild{cmd: cmd, stdin: stdin, done: make(chan struct{}), synced: map[int]bool{}}
	go func() {
		fc.relay(stdout, c.SidecarsPerNode, out)
		fc.err = cmd.Wait()
		close(fc.done)
	}()
	return fc, nil
}

// relay passes the child's routing lines to out and keeps its progress.
func (fc *followerChild) relay(r io.Reader, spn int, out *simproto.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		e, err := simproto.ParseEvent(sc.Bytes())
		if err != nil {
			fc.mu.Lock()
			fc.bad++
			fc.mu.Unlock()
			continue
		}
		switch e.Event {
		case simproto.EventRouting:
			out.Routing(e.Node, e.Sidecar, e.Version, e.Keys, e.Time())
			fc.mu.Lock()
			fc.synced[e.Node*spn+e.Sidecar] = true
			fc.mu.Unlock()
		case simproto.EventProgress:
			fc.mu.Lock()
			fc.stats = e.Stats
			fc.mu.Unlock()
		}
	}
}

// progress returns how many sidecars accepted a first table, and the
// child's last counters.
func (fc *followerChild) progress() (synced int, stats map[string]float64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	stats = maps.Clone(fc.stats)
	if fc.bad > 0 {
		if stats == nil {
			stats = map[string]float64{}
		}
		stats["follower_lines_refused"] = float64(fc.bad)
	}
	return len(fc.synced), stats
}

// exited reports whether the child is gone, and why.
func (fc *followerChild) exited() (bool, error) {
	select {
	case <-fc.done:
		return true, fc.err
	default:
		return false, nil
	}
}

// stop ends the child by its PID (SIGTERM, then SIGKILL after grace).
func (fc *followerChild) stop(grace time.Duration) {
	if ok, _ := fc.exited(); ok {
		return
	}
	_ = fc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-fc.done:
	case <-time.After(grace):
		_ = fc.cmd.Process.Kill()
		<-fc.done
	}
}

var errFollowersGone = errors.New("the routing followers' process exited")
