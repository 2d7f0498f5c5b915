// Package apps runs real application code through heatsink, on the demo's
// stack (manager, two node agents, four sidecars, the demo's policy with
// coalesce, local cache, replicate and split allowed) in front of a
// standalone Redis and a 3-master Redis Cluster: a job queue, a
// leaderboard, a hash of counters, a feature-flag set, a product hash, a
// Lua limiter and a fixed-window limiter, each through go-redis (two
// sidecars) and through Node (the other two: BullMQ, ioredis,
// rate-limiter-flexible), every workload hot enough to cross the policy's
// thresholds. It checks that no command is refused because of a
// mitigation, that every value is exact, and reports which move each key
// got and the relief (busiest master ÷ mean, upstream ÷ client calls).
package apps

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// runFor is how long the workloads run hot: the relief is measured over
// its second half, once the policy has had time to act (sustainFor 1 s,
// 2-s window, a split's first epoch 2 s ahead). HEATSINK_APPS_SECONDS
// lengthens it (make bench).
func runFor() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("HEATSINK_APPS_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 14 * time.Second
}

// TestApplications: every workload, through go-redis and Node, on the
// demo's stack in front of a standalone Redis and a 3-master cluster.
func TestApplications(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and the control plane; skipped with -short")
	}
	node := nodeArgv(t)
	s := redistest.Standalone(t)
	c := redistest.Cluster(t)
	for _, up := range []upstream{{name: "standalone", addrs: []string{s.Addr}}, {name: "cluster", cluster: true, addrs: c.Addrs()}} {
		t.Run(up.name, func(t *testing.T) { playApps(t, up, node) })
	}
}

// result is one workload's outcome on one side.
type result struct {
	tag             string
	calls, upstream int64 // over the measured half
	refused, errs   int64
	lastErr         string
	exact           bool
	detail, move    string
}

func playApps(t *testing.T, up upstream, node []string) {
	st := startStack(t, up)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	moves := st.watchMoves(ctx)
	mon := startMonitor(t, up.addrs)

	// Node on sidecars 1 and 3 (one per node), go-redis on 0 and 2.
	js := startNode(t, node, up.cluster, st.sidecars[1], st.sidecars[3])
	gc := newCounts()
	var clients []redis.UniversalClient
	for _, i := range []int{0, 2} {
		c := st.client(i)
		c.AddHook(hook{gc})
		clients = append(clients, c)
		defer c.Close()
	}
	wls := goWorkloads()
	for _, w := range wls {
		if err := w.setup(ctx, clients[0]); err != nil {
			t.Fatalf("%s: set-up: %v", w.name(), err)
		}
	}

	// Every workload's clients play a round every 100 ms until stop.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range wls {
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pace := time.NewTicker(100 * time.Millisecond)
				defer pace.Stop()
				for {
					select {
					case <-stop:
						return
					case <-pace.C:
					}
					w.round(ctx, i, c)
				}
			}()
		}
	}
	js.send(t, "go")
	d := runFor()
	time.Sleep(d / 2) // the load's first half: the policy acts
	goMid, jsMid := gc.snapshot(), js.snap(t)
	upMid, mastersMid := mon.snapshot()
	time.Sleep(d - d/2) // the measured half
	goEnd, jsEnd := gc.snapshot(), js.snap(t)
	upEnd, mastersEnd := mon.snapshot()
	close(stop)
	wg.Wait()
	jsOut := js.finish(t)

	var results []result
	for _, w := range wls {
		tag := "go:" + w.name()
		ok, detail := w.check(ctx, clients[0])
		gc.mu.Lock()
		r := result{tag: tag, calls: goEnd[tag] - goMid[tag], refused: gc.refused[tag], errs: gc.errs[tag], lastErr: gc.lastErr[tag], exact: ok, detail: detail}
		gc.mu.Unlock()
		results = append(results, r)
	}
	for _, name := range workloadNames {
		tag := "js:" + name
		e := jsOut.Exact[tag]
		ok, _ := e[0].(bool)
		detail, _ := e[1].(string)
		results = append(results, result{tag: tag, calls: jsEnd[tag] - jsMid[tag], refused: jsOut.Refused[tag], errs: jsOut.Errors[tag],
			lastErr: jsOut.LastError[tag], exact: ok, detail: detail})
	}
	busiest := busiestOverMean(mastersMid, mastersEnd)
	for i := range results {
		r := &results[i]
		r.upstream = upEnd[r.tag] - upMid[r.tag]
		r.move = moves.of(r.tag)
		ratio := "-"
		if r.calls > 0 {
			ratio = fmt.Sprintf("%.3f", float64(r.upstream)/float64(r.calls))
		}
		exact := "EXACT"
		if !r.exact {
			exact = "NOT EXACT"
		}
		// One line per workload, read by hack/bench.d/39-apps.sh.
		t.Logf("apps-row|%s|%s|%d|%d|%s|%s|%s|%s", up.name, r.tag, r.refused, r.errs, ratio, busiest, exact+": "+r.detail, r.move)
		if r.refused != 0 {
			t.Errorf("%s: %d commands refused because of a mitigation, the last: %s; moves: %s", r.tag, r.refused, r.lastErr, r.move)
		}
		if r.errs != 0 {
			t.Errorf("%s: %d error replies, the last: %s", r.tag, r.errs, r.lastErr)
		}
		if !r.exact {
			t.Errorf("%s: not exact: %s; moves: %s", r.tag, r.detail, r.move)
		}
		if r.calls == 0 {
			t.Errorf("%s: no command sent in the measured half", r.tag)
		}
		if r.move == notHot {
			// Every workload runs over the policy's thresholds: one the
			// manager never lists proves nothing about its moves.
			t.Errorf("%s: never listed hot in the policy's status", r.tag)
		}
	}
}

// busiestOverMean is the busiest master's commands ÷ the masters' mean
// between two MONITOR snapshots ("-" for one master).
func busiestOverMean(before, after []int64) string {
	if len(after) < 2 {
		return "-"
	}
	var sum, max int64
	for i := range after {
		d := after[i] - before[i]
		sum += d
		max = maxInt(max, d)
	}
	if sum == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(max)*float64(len(after))/float64(sum))
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// nodeArgv is node with testdata/apps.js and NODE_PATH set to the
// project's bin/node_modules (hack/setup-clients.sh installs its packages).
func nodeArgv(t *testing.T) []string {
	t.Helper()
	modules, err := filepath.Abs("../../bin/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"ioredis", "bullmq", "rate-limiter-flexible"} {
		if _, err := os.Stat(filepath.Join(modules, pkg, "package.json")); err != nil {
			t.Skipf("%s is not installed in %s (hack/setup-clients.sh installs it): %v", pkg, modules, err)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node is not installed (hack/setup-clients.sh installs it): %v", err)
	}
	return []string{node, "testdata/apps.js", "NODE_PATH=" + modules}
}

// nodeApps is the running Node side (testdata/apps.js).
type nodeApps struct {
	in   io.WriteCloser
	out  *bufio.Reader
	errb *strings.Builder
}

type nodeResult struct {
	Calls, Refused, Errors map[string]int64
	LastError              map[string]string
	Exact                  map[string][2]any
}

func startNode(t *testing.T, argv []string, cluster bool, addrs ...string) *nodeApps {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cl := "0"
	if cluster {
		cl = "1"
	}
	cmd := exec.CommandContext(ctx, argv[0], append([]string{argv[1], cl}, addrs...)...)
	cmd.Env = append(os.Environ(), argv[2])
	n := &nodeApps{errb: &strings.Builder{}}
	cmd.Stderr = n.errb
	var err error
	if n.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	n.out = bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.in.Close(); _ = cmd.Wait() })
	if l := n.line(t); l != "ready" {
		t.Fatalf("node: %q before ready", l)
	}
	return n
}

func (n *nodeApps) line(t *testing.T) string {
	t.Helper()
	l, err := n.out.ReadString('\n')
	if err != nil {
		t.Fatalf("node: %v; stderr:\n%s", err, n.errb.String())
	}
	return strings.TrimSpace(l)
}

func (n *nodeApps) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := io.WriteString(n.in, cmd+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (n *nodeApps) snap(t *testing.T) map[string]int64 {
	t.Helper()
	n.send(t, "snap")
	var out nodeResult
	if err := json.Unmarshal([]byte(n.line(t)), &out); err != nil {
		t.Fatal(err)
	}
	return out.Calls
}

func (n *nodeApps) finish(t *testing.T) nodeResult {
	t.Helper()
	n.send(t, "stop")
	var out nodeResult
	l := n.line(t)
	if err := json.Unmarshal([]byte(l), &out); err != nil {
		t.Fatalf("node printed %q: %v", l, err)
	}
	return out
}
