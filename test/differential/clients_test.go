package differential

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// batch is what a runner sends at once: ops one by one (plain), in one
// pipeline, or in one MULTI/EXEC transaction (tx).
type batch struct {
	Mode string     `json:"mode"`
	Ops  [][]string `json:"ops"`
}

// outcome is a runner's answer to a batch: one normalised reply per op,
// or Aborted, the error of a transaction that failed as a whole.
type outcome struct {
	Replies []string `json:"r"`
	Aborted string   `json:"x"`
}

// runner drives one real client library, connected to one address.
type runner interface {
	do(t *testing.T, b batch) outcome
}

// lib is a client library and how to start a runner of it.
type lib struct {
	name string
	// noTx says why the library cannot run transactions against this
	// topology ("" when it can).
	noTx  func(cluster bool) string
	start func(t *testing.T, addr string, cluster bool, password string) runner
}

func libs(t *testing.T) []lib {
	out := []lib{{name: "go-redis", noTx: func(bool) string { return "" }, start: startGoRedis}}
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import redis.cluster").Run(); err == nil {
		out = append(out, lib{
			name: "redis-py",
			noTx: func(cluster bool) string {
				if cluster {
					return "redis-py 4.3.4's RedisCluster pipelines have no transactions"
				}
				return ""
			},
			start: func(t *testing.T, addr string, cluster bool, pw string) runner {
				return startScript(t, []string{py, "testdata/runner.py"}, nil, addr, cluster, pw)
			},
		})
	} else {
		t.Logf("redis-py not installed for %s (hack/setup-clients.sh installs python3-redis): its cells are skipped", py)
	}
	modules, _ := filepath.Abs("../../bin/node_modules")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(modules, "ioredis", "package.json")); serr == nil && err == nil {
		out = append(out, lib{
			name: "ioredis",
			noTx: func(bool) string { return "" },
			start: func(t *testing.T, addr string, cluster bool, pw string) runner {
				return startScript(t, []string{node, "testdata/runner.js"}, []string{"NODE_PATH=" + modules}, addr, cluster, pw)
			},
		})
	} else {
		t.Logf("ioredis or node not installed in %s (hack/setup-clients.sh installs them): its cells are skipped", modules)
	}
	return out
}

// goRedis is go-redis v9 with its defaults (RESP3, MaxRetries 3): a
// Client, or a ClusterClient when the topology is a cluster.
type goRedis struct{ c redis.UniversalClient }

func startGoRedis(t *testing.T, addr string, cluster bool, pw string) runner {
	var c redis.UniversalClient
	if cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, Password: pw})
	} else {
		c = redis.NewClient(&redis.Options{Addr: addr, Password: pw})
	}
	t.Cleanup(func() { c.Close() })
	return goRedis{c}
}

func (g goRedis) do(t *testing.T, b batch) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), replyWait)
	defer cancel()
	args := func(op []string) []any {
		a := make([]any, len(op))
		for i, s := range op {
			a[i] = s
		}
		return a
	}
	var cmds []*redis.Cmd
	switch b.Mode {
	case "plain":
		for _, op := range b.Ops {
			cmds = append(cmds, g.c.Do(ctx, args(op)...))
		}
	default:
		p := g.c.Pipeline()
		if b.Mode == "tx" {
			p = g.c.TxPipeline()
		}
		for _, op := range b.Ops {
			cmds = append(cmds, p.Do(ctx, args(op)...))
		}
		_, err := p.Exec(ctx)
		if b.Mode == "tx" && err != nil {
			// go-redis may return the first queued command's error; EXEC's
			// own (EXECABORT) is then on the commands it discarded.
			for _, e := range append([]error{err}, cmdErrs(cmds)...) {
				if strings.HasPrefix(e.Error(), "EXECABORT") {
					return outcome{Aborted: "e:" + e.Error() + " (" + err.Error() + ")"}
				}
			}
			// ClusterClient reads EXEC's EXECABORT as it does with Redis
			// itself: each command refused at queue time keeps its error,
			// every other one gets the first of them (classifyExecError).
			var rerr redis.Error
			if errs := cmdErrs(cmds); errors.As(err, &rerr) && len(errs) == len(cmds) && queueErrors(errs, err) {
				return outcome{Aborted: "e:EXECABORT (go-redis: every command failed with " + err.Error() + ")"}
			}
		}
	}
	var o outcome
	for _, c := range cmds {
		v, err := c.Result()
		if ctx.Err() != nil {
			t.Fatalf("go-redis: no reply within %v to %v: the connection hangs", replyWait, b)
		}
		o.Replies = append(o.Replies, normGo(v, err))
	}
	return o
}

func cmdErrs(cmds []*redis.Cmd) (out []error) {
	for _, c := range cmds {
		if c.Err() != nil {
			out = append(out, c.Err())
		}
	}
	return out
}

// queueErrors reports whether errs are what go-redis' ClusterClient gives
// the commands of a transaction EXEC aborted: first, or a refusal of
// heatsink's at queue time.
func queueErrors(errs []error, first error) bool {
	for _, e := range errs {
		if e.Error() != first.Error() && !refusal("e:"+e.Error()) {
			return false
		}
	}
	return true
}

// normGo normalises a go-redis reply as the scripts do (runner.py).
func normGo(v any, err error) string {
	if errors.Is(err, redis.Nil) {
		return "nil"
	}
	if err != nil {
		return "e:" + err.Error()
	}
	switch v := v.(type) {
	case nil:
		return "nil"
	case int64:
		return "i:" + strconv.FormatInt(v, 10)
	case string:
		return "s:" + v
	case []any:
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = normGo(x, nil)
		}
		return "a:[" + strings.Join(s, ",") + "]"
	case map[any]any:
		s := make([]string, 0, len(v))
		for k, x := range v {
			s = append(s, normGo(k, nil)+"="+normGo(x, nil))
		}
		sort.Strings(s)
		return "m:{" + strings.Join(s, ",") + "}"
	}
	return fmt.Sprintf("s:%v", v)
}

// script is a runner in another language: a process speaking
// runner.py's protocol on its stdin and stdout.
type script struct {
	name  string
	in    io.Writer
	lines chan string
	errb  *strings.Builder
}

func startScript(t *testing.T, argv, env []string, addr string, cluster bool, pw string) runner {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cl := "0"
	if cluster {
		cl = "1"
	}
	cmd := exec.Command(argv[0], append(argv[1:], host, port, cl, pw)...)
	cmd.Env = append(os.Environ(), env...)
	s := &script{name: filepath.Base(argv[len(argv)-1]), lines: make(chan string, 1), errb: &strings.Builder{}}
	cmd.Stderr = s.errb
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.in = in
	go func() {
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				close(s.lines)
				return
			}
			s.lines <- strings.TrimSpace(l)
		}
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	if l := s.line(t); l != "ready" {
		t.Fatalf("%s: %q before ready", s.name, l)
	}
	return s
}

func (s *script) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			t.Fatalf("%s exited; stderr:\n%s", s.name, s.errb.String())
		}
		return l
	case <-time.After(replyWait):
		t.Fatalf("%s: no answer within %v: the connection hangs; stderr:\n%s", s.name, replyWait, s.errb.String())
	}
	return ""
}

func (s *script) do(t *testing.T, b batch) outcome {
	t.Helper()
	j, _ := json.Marshal(b)
	if _, err := s.in.Write(append(j, '\n')); err != nil {
		t.Fatalf("%s: %v; stderr:\n%s", s.name, err, s.errb.String())
	}
	var o outcome
	if err := json.Unmarshal([]byte(s.line(t)), &o); err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	return o
}
