package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heatsink-dev/heatsink/bench/fleetsim/simproto"
)

// A fleet larger than one process's open-files limit allows is split over
// several member processes (this binary with --range-first/--range-count),
// each running a contiguous range of the nodes with its own routing
// followers' child, and so its own descriptor budget; this process, the
// coordinator, starts them, passes their lines on as one simulator's (node
// indices are fleet-wide; the manager sees one fleet) and starts their
// traffic at one instant once every member is ready (simproto.RunRange
// times the phases from it, so the members' traffic is one fleet's).

// nodesPerProcess is how many nodes one member can hold within limit open
// files (descriptorsNeeded, and its followers' child needs fewer).
func nodesPerProcess(limit uint64, transport string, sidecarsPerNode int) int {
	perNode := descriptorsNeeded(simproto.Config{Nodes: 1, SidecarsPerNode: sidecarsPerNode}, transport) - descriptorsNeeded(simproto.Config{SidecarsPerNode: sidecarsPerNode}, transport)
	base := descriptorsNeeded(simproto.Config{SidecarsPerNode: sidecarsPerNode}, transport)
	if limit <= base {
		return 0
	}
	return int((limit - base) / perNode)
}

// splitNodes splits nodes into processes contiguous ranges (at least
// enough that none holds more than perProcess), their sizes at most one
// apart, in order.
func splitNodes(nodes, perProcess, processes int) ([]simproto.Range, error) {
	if perProcess < 1 {
		return nil, errors.New("the open-files limit leaves room for no node in a process")
	}
	need := (nodes + perProcess - 1) / perProcess
	if processes == 0 {
		processes = need
	}
	if processes < need {
		return nil, fmt.Errorf("%d nodes in %d processes: over the open-files limit of one (%d nodes each at most); want at least %d processes", nodes, processes, perProcess, need)
	}
	if processes > nodes {
		return nil, fmt.Errorf("%d processes for %d nodes: want at most one per node", processes, nodes)
	}
	out := make([]simproto.Range, processes)
	first := 0
	for k := range out {
		n := nodes / processes
		if k < nodes%processes {
			n++
		}
		out[k] = simproto.Range{First: first, Count: n}
		first += n
	}
	return out, nil
}

// mergeStats folds the members' counters into one simulator's: counts add
// up; maxima, quantiles (each member's lag p50 / p99: the fleet's is at most
// the worst member's) and durations such as the start-up are the largest.
func mergeStats(members []map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, m := range members {
		for k, v := range m {
			if isWorstOf(k) {
				out[k] = max(out[k], v)
			} else {
				out[k] += v
			}
		}
	}
	return out
}

func isWorstOf(k string) bool {
	return strings.Contains(k, "max") || strings.HasSuffix(k, "_p50_seconds") || strings.HasSuffix(k, "_p99_seconds") || k == "startup_seconds"
}

// startLine is what the coordinator writes to a ready member: the instant
// its traffic starts (Unix nanoseconds).
const startLine = "start "

// readStart reads the coordinator's start line.
func readStart(r io.Reader) (time.Time, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the start instant: %w", err)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), startLine)
	ns, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || !ok {
		return time.Time{}, fmt.Errorf("start line %q: want %q and Unix nanoseconds", line, startLine)
	}
	return time.Unix(0, ns), nil
}

// member is the coordinator's handle on one member process.
type member struct {
	r     simproto.Range
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error
}

// coordinator runs the members and speaks for them.
type coordinator struct {
	c   simproto.Config
	o   *options
	out *simproto.Writer

	mu       sync.Mutex
	members  []*member
	progress []map[string]float64
	ready    []bool
	final    []map[string]float64 // done counters
	phases   map[string]bool
	failed   error
	changed  chan struct{} // a member became ready, finished or failed
}

// memberArgs are the arguments of the member running r of members: the
// start rate and window are the fleet's, shared among them (the manager
// sees agents arrive at --start-rate, at most --start-window connecting,
// whatever the split).
func (co *coordinator) memberArgs(r simproto.Range, members int) []string {
	args := []string{"--range-first", fmt.Sprint(r.First), "--range-count", fmt.Sprint(r.Count),
		"--start-rate", fmt.Sprint(co.o.startRate / float64(members)), "--start-window", fmt.Sprint(max(1, co.o.startWindow/members)),
		"--transport", co.o.transport}
	return append(args, co.c.Args()...)
}

func (co *coordinator) start(ranges []simproto.Range) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	co.progress = make([]map[string]float64, len(ranges))
	co.ready = make([]bool, len(ranges))
	co.final = make([]map[string]float64, len(ranges))
	co.phases = map[string]bool{}
	co.changed = make(chan struct{}, 1)
	for k, r := range ranges {
		cmd := exec.Command(self, co.memberArgs(r, len(ranges))...)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting member %d (nodes %d..%d): %w", k, r.First, r.First+r.Count-1, err)
		}
		m := &member{r: r, cmd: cmd, stdin: stdin, done: make(chan struct{})}
		co.members = append(co.members, m)
		go func() {
			co.relay(k, stdout)
			m.err = cmd.Wait()
			close(m.done)
			co.mu.Lock()
			if co.final[k] == nil && co.failed == nil {
				co.failed = fmt.Errorf("member %d (nodes %d..%d) exited before done: %v", k, r.First, r.First+r.Count-1, m.err)
			}
			co.mu.Unlock()
			co.signal()
		}()
	}
	return nil
}

func (co *coordinator) signal() {
	select {
	case co.changed <- struct{}{}:
	default:
	}
}

// relay passes member k's lines on: routing lines as they are, each phase
// once (every member announces the same instants), and keeps its progress,
// readiness and done counters.
func (co *coordinator) relay(k int, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		e, err := simproto.ParseEvent(sc.Bytes())
		if err != nil {
			continue
		}
		switch e.Event {
		case simproto.EventRouting:
			co.out.Routing(e.Node, e.Sidecar, e.Version, e.Keys, e.Time())
		case simproto.EventAgentRouting:
			co.out.AgentRouting(e.Node, e.Policy, e.Version, e.Time())
		case simproto.EventPhase:
			co.mu.Lock()
			first := !co.phases[e.Phase]
			co.phases[e.Phase] = true
			co.mu.Unlock()
			if first {
				co.out.Phase(e.Phase, e.Time())
			}
		case simproto.EventProgress:
			co.mu.Lock()
			co.progress[k] = e.Stats
			co.mu.Unlock()
		case simproto.EventReady:
			co.mu.Lock()
			co.ready[k] = true
			co.mu.Unlock()
			co.signal()
		case simproto.EventDone:
			co.mu.Lock()
			co.final[k] = e.Stats
			co.mu.Unlock()
			co.signal()
		case simproto.EventError:
			co.mu.Lock()
			if co.failed == nil {
				co.failed = fmt.Errorf("member %d: %s", k, e.Message)
			}
			co.mu.Unlock()
			co.signal()
		}
	}
}

// wait waits until cond holds of the members (under mu), a member failed,
// or ctx ends.
func (co *coordinator) wait(ctx context.Context, cond func() bool) error {
	for {
		co.mu.Lock()
		ok, failed := cond(), co.failed
		co.mu.Unlock()
		if failed != nil {
			return failed
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-co.changed:
		case <-time.After(time.Second):
		}
	}
}

func (co *coordinator) mergedProgress() map[string]float64 {
	co.mu.Lock()
	defer co.mu.Unlock()
	p := mergeStats(co.progress)
	p["nodes"], p["sidecars"], p["processes"] = float64(co.c.Nodes), float64(co.c.Sidecars()), float64(len(co.members))
	return p
}

// runCoordinator runs the fleet as the members of ranges.
func runCoordinator(ctx context.Context, c simproto.Config, o *options, ranges []simproto.Range, out *simproto.Writer) int {
	began := time.Now()
	co := &coordinator{c: c, o: o, out: out}
	defer co.stop(10 * time.Second)
	fail := func(err error) int {
		out.Progress(time.Now(), co.mergedProgress())
		out.Error(time.Now(), err.Error())
		return 1
	}
	if err := co.start(ranges); err != nil {
		return fail(err)
	}
	startCtx, startDone := context.WithTimeout(ctx, c.StartTimeout)
	defer startDone()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-startCtx.Done():
				return
			case <-t.C:
				out.Progress(time.Now(), co.mergedProgress())
			}
		}
	}()
	allReady := func() bool {
		for _, r := range co.ready {
			if !r {
				return false
			}
		}
		return true
	}
	if err := co.wait(startCtx, allReady); err != nil {
		return fail(fmt.Errorf("not ready within %s in %d processes: %w", c.StartTimeout, len(ranges), err))
	}
	startDone()
	readyAt := time.Now()
	out.Ready(readyAt)
	for _, m := range co.members {
		if _, err := fmt.Fprintf(m.stdin, "%s%d\n", startLine, readyAt.UnixNano()); err != nil {
			return fail(fmt.Errorf("starting member traffic: %w", err))
		}
	}
	runCtx, runDone := context.WithTimeout(ctx, c.Duration+time.Minute)
	defer runDone()
	allDone := func() bool {
		for _, f := range co.final {
			if f == nil {
				return false
			}
		}
		return true
	}
	if err := co.wait(runCtx, allDone); err != nil {
		return fail(err)
	}
	co.mu.Lock()
	stats := mergeStats(co.final)
	co.mu.Unlock()
	stats["processes"] = float64(len(ranges))
	stats["startup_seconds"] = readyAt.Sub(began).Seconds()
	out.Done(time.Now(), stats)
	select {
	case <-ctx.Done():
	case <-time.After(simproto.Linger):
	}
	return 0
}

// stop ends the members by their PIDs (SIGTERM, then SIGKILL after grace).
func (co *coordinator) stop(grace time.Duration) {
	for _, m := range co.members {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for _, m := range co.members {
		select {
		case <-m.done:
		case <-deadline:
			_ = m.cmd.Process.Kill()
			<-m.done
		}
	}
}
