package clients

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/sidecar"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// The shed workload: rounds of pairs of INCR {<client><mode>}:shed then
// INCR {<client><mode>}:other, the shed key first in every pipeline: one
// command at a time, one pipeline of the pairs a round, or one transaction
// per pair. The shed key admits one write a second (minPerSecond, no
// demand published), so the first pipeline's first command takes the
// token and every later pipeline of the run starts with a refused command.
const (
	shedRounds = 5
	shedPairs  = 20
)

// execAbort is Redis' reply to the EXEC of a transaction with a command
// refused at queue time.
const execAbort = "EXECABORT Transaction discarded because of previous errors."

// shedRun is what one client saw in one mode: the increments acknowledged
// per key, the refusals, the pipelines whose first command was refused,
// and the distinct error messages it got.
type shedRun struct {
	Mode         string   `json:"mode"`
	Shed         int64    `json:"shed"`
	Other        int64    `json:"other"`
	Refused      int      `json:"refused"`
	FirstRefused int      `json:"firstRefused"`
	Errors       []string `json:"errors"`
}

// TestShedPipelineAppliesEachWriteOnce: a real sidecar (its routing file
// sheds the first key of every pipeline, one write a second) in front of a
// standalone redis-server and of a 3-master cluster; go-redis Client and
// ClusterClient, redis-py Redis and RedisCluster, ioredis Redis and Cluster,
// each in its default configuration (retries included), increment the
// shed key and another key in turn, one command at a time, in pipelines and
// in transactions (MULTI/EXEC; redis-py's RedisCluster has none). Redis
// holds exactly the increments each client acknowledged (no admitted
// command applied twice: with the refusal TRYAGAIN, go-redis sent a whole
// pipeline again when its first command was refused), some pipeline began
// with a refused command, and every refusal reached the application as
// the documented one: routing.ShedError, and for a transaction EXECABORT
// with ShedError for its refused command, nothing of it applied.
func TestShedPipelineAppliesEachWriteOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	type lib struct {
		name  string
		modes []string
		run   func(t *testing.T, addr string, cluster bool, prefix string, modes []string) []shedRun
	}
	libs := []lib{
		{"go", []string{"plain", "pipeline", "tx"}, goShed},
		{"py", []string{"plain", "pipeline", "tx"}, scriptShed(pyArgv)},
		{"js", []string{"plain", "pipeline", "tx"}, scriptShed(jsArgv)},
	}
	s := redistest.Standalone(t)
	c := redistest.Cluster(t)
	for _, up := range []upstream{{name: "standalone", addrs: []string{s.Addr}}, {name: "cluster", cluster: true, addrs: c.Addrs()}} {
		t.Run(up.name, func(t *testing.T) {
			var keys []string
			for _, l := range libs {
				for _, m := range l.modes {
					keys = append(keys, fmt.Sprintf("{%s%s}:shed", l.name, m))
				}
			}
			addr := shedSidecar(t, up, keys)
			for _, l := range libs {
				t.Run(l.name, func(t *testing.T) {
					modes := l.modes
					if l.name == "py" && up.cluster {
						modes = []string{"plain", "pipeline"} // RedisCluster has no transactions
					}
					direct(t, up, func(c redis.UniversalClient) error {
						for _, m := range modes {
							if err := c.Del(context.Background(), fmt.Sprintf("{%s%s}:shed", l.name, m), fmt.Sprintf("{%s%s}:other", l.name, m)).Err(); err != nil {
								return err
							}
						}
						return nil
					})
					for _, r := range l.run(t, addr, up.cluster, l.name, modes) {
						checkShedRun(t, up, l.name, r)
					}
				})
			}
		})
	}
}

// checkShedRun compares what one client acknowledged with what Redis holds.
func checkShedRun(t *testing.T, up upstream, lib string, r shedRun) {
	t.Helper()
	key := fmt.Sprintf("{%s%s}:", lib, r.Mode)
	var inShed, inOther int64
	direct(t, up, func(c redis.UniversalClient) error {
		ctx := context.Background()
		inShed, _ = c.Get(ctx, key+"shed").Int64()
		inOther, _ = c.Get(ctx, key+"other").Int64()
		return nil
	})
	extra := inShed - r.Shed + inOther - r.Other
	t.Logf("%s %s via the sidecar (%s): shed key %d acknowledged, %d in Redis; other key %d acknowledged, %d in Redis; %d extra; %d refused, %d pipelines refused first; errors %q",
		lib, r.Mode, up.name, r.Shed, inShed, r.Other, inOther, extra, r.Refused, r.FirstRefused, r.Errors)
	if inShed != r.Shed || inOther != r.Other {
		t.Errorf("%s %s: Redis holds %d and %d increments, the client acknowledged %d and %d: %d applied twice or more",
			lib, r.Mode, inShed, inOther, r.Shed, r.Other, extra)
	}
	if r.Refused == 0 {
		t.Errorf("%s %s: nothing was refused: the key was not shed", lib, r.Mode)
	}
	if r.Mode != "plain" && r.FirstRefused == 0 {
		t.Errorf("%s %s: no pipeline began with a refused command", lib, r.Mode)
	}
	for _, e := range r.Errors {
		// redis-py prefixes a pipeline's error with the command's place.
		if !strings.HasSuffix(e, routing.ShedError) && !(r.Mode == "tx" && e == execAbort) {
			t.Errorf("%s %s: the application got %q, want %q (or, for a transaction, %q)", lib, r.Mode, e, routing.ShedError, execAbort)
		}
	}
}

// shedSidecar runs a real sidecar in front of up whose routing file sheds
// keys (writes: one a second), and returns its client address once its
// table is in force.
func shedSidecar(t *testing.T, up upstream, keys []string) string {
	t.Helper()
	var entries []routing.Entry
	for _, k := range keys {
		entries = append(entries, routing.Entry{Key: k, Source: routing.SourceDetected,
			Shed: &routing.Shed{WritesPerSecond: 1, MinPerSecond: 1}})
	}
	return fileSidecar(t, up, entries)
}

// fileSidecar runs a real sidecar in front of up whose routing file holds
// entries, and returns its client address once its table is in force.
func fileSidecar(t *testing.T, up upstream, entries []routing.Entry) string {
	t.Helper()
	tbl := routing.Table{SchemaVersion: 1, Policy: "ns/p", Version: 1, EpochMillis: 60000, Entries: entries}
	slices.SortFunc(tbl.Entries, func(a, b routing.Entry) int { return strings.Compare(a.Key, b.Key) }) // a table's entries are sorted
	b, err := json.Marshal(tbl)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "routing.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, hl := listen(t), listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, sidecar.Config{Listener: ln, HTTPListener: hl, Upstreams: up.addrs, Cluster: up.cluster,
			Policy: "p", Namespace: "ns", RoutingFile: file})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar: %v", err)
		}
	})
	s := &stack{metrics: "http://" + hl.Addr().String() + "/metrics"}
	eventually.True(t, 30*time.Second, "the sidecar serves under its routing file", func() bool {
		v, _ := s.metric("heatsink_proxy_routing_in_force")
		return v == 1
	})
	return ln.Addr().String()
}

// goShed plays the workload with go-redis in its default configuration:
// Client for a standalone upstream, ClusterClient for a cluster.
func goShed(t *testing.T, addr string, cluster bool, prefix string, modes []string) []shedRun {
	t.Helper()
	ctx := context.Background()
	var c redis.UniversalClient
	if cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	} else {
		c = redis.NewClient(&redis.Options{Addr: addr})
	}
	defer c.Close()
	var out []shedRun
	for _, mode := range modes {
		shed, other := fmt.Sprintf("{%s%s}:shed", prefix, mode), fmt.Sprintf("{%s%s}:other", prefix, mode)
		r := shedRun{Mode: mode}
		seen := func(err error) {
			r.Refused++
			for _, m := range r.Errors {
				if m == err.Error() {
					return
				}
			}
			r.Errors = append(r.Errors, err.Error())
		}
		for range shedRounds {
			if mode == "plain" {
				for range shedPairs {
					if err := c.Incr(ctx, shed).Err(); err != nil {
						seen(err)
					} else {
						r.Shed++
					}
					if err := c.Incr(ctx, other).Err(); err != nil {
						t.Fatalf("INCR %s: %v", other, err)
					}
					r.Other++
				}
				continue
			}
			if mode == "tx" {
				for range shedPairs {
					p := c.TxPipeline()
					p.Incr(ctx, shed)
					p.Incr(ctx, other)
					if cmds, err := p.Exec(ctx); err != nil {
						// EXECABORT, and the refused command its refusal.
						seen(err)
						r.FirstRefused++
						for _, cmd := range cmds {
							if cmd.Err() != nil && cmd.Err().Error() != err.Error() {
								seen(cmd.Err())
							}
						}
						continue
					}
					r.Shed++
					r.Other++
				}
				continue
			}
			p := c.Pipeline()
			for range shedPairs {
				p.Incr(ctx, shed)
				p.Incr(ctx, other)
			}
			cmds, _ := p.Exec(ctx)
			if cmds[0].Err() != nil {
				r.FirstRefused++
			}
			for i, cmd := range cmds {
				switch {
				case cmd.Err() != nil:
					seen(cmd.Err())
				case i%2 == 0:
					r.Shed++
				default:
					r.Other++
				}
			}
		}
		out = append(out, r)
	}
	return out
}

func pyArgv(t *testing.T) ([]string, []string) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import redis.cluster").Run(); err != nil {
		t.Skipf("redis-py is not installed for %s (hack/setup-clients.sh installs python3-redis): %v", py, err)
	}
	return []string{py, "testdata/shed.py"}, nil
}

func jsArgv(t *testing.T) ([]string, []string) {
	modules, err := filepath.Abs("../../bin/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "ioredis", "package.json")); err != nil {
		t.Skipf("ioredis is not installed in %s (hack/setup-clients.sh installs it): %v", modules, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node is not installed (hack/setup-clients.sh installs it): %v", err)
	}
	return []string{node, "testdata/shed.js"}, []string{"NODE_PATH=" + modules}
}

// scriptShed plays the workload with an external client (testdata/shed.py,
// testdata/shed.js), which prints one JSON line per mode.
func scriptShed(argv func(t *testing.T) ([]string, []string)) func(t *testing.T, addr string, cluster bool, prefix string, modes []string) []shedRun {
	return func(t *testing.T, addr string, cluster bool, prefix string, modes []string) []shedRun {
		t.Helper()
		args, env := argv(t)
		host, port, _ := strings.Cut(addr, ":")
		cl := "0"
		if cluster {
			cl = "1"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], append(args[1:], host, port, cl, prefix,
			strconv.Itoa(shedRounds), strconv.Itoa(shedPairs))...)
		cmd.Args = append(cmd.Args, modes...)
		cmd.Env = append(os.Environ(), env...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v; stderr:\n%s", strings.Join(args, " "), err, stderr.String())
		}
		var runs []shedRun
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			var r shedRun
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s printed %q: %v", args[0], sc.Text(), err)
			}
			runs = append(runs, r)
		}
		if len(runs) != len(modes) {
			t.Fatalf("%s reported %d modes of %d; stderr:\n%s", args[0], len(runs), len(modes), stderr.String())
		}
		return runs
	}
}
