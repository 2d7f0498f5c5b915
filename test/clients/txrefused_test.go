package clients

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// TestTxRefusedCommandAborts: a real sidecar (its routing file splits
// {tx}ctr) in front of a standalone redis-server and of a 3-master
// cluster; go-redis Client/ClusterClient (TxPipeline), redis-py Redis
// (pipeline with transaction=True; RedisCluster has no transactions) and
// ioredis Redis/Cluster (multi), each in its default configuration, run
// MULTI, INCR {tx}other, APPEND {tx}ctr x (which the sidecar refuses inside
// MULTI), INCR {tx}other, EXEC: the transaction fails with EXECABORT
// (go-redis' ClusterClient and redis-py report the refused command's error
// instead, as they do for Redis' own EXECABORT), nothing of it is applied, at once (no client waits for
// replies EXEC did not send), and the next command on the same client
// works outside any transaction.
func TestTxRefusedCommandAborts(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	const key, other = "{tx}ctr", "{tx}other"
	const refusal = "ERR heatsink: APPEND on a key mitigated by split is not supported inside MULTI"
	s := redistest.Standalone(t)
	c := redistest.Cluster(t)
	for _, up := range []upstream{{name: "standalone", addrs: []string{s.Addr}}, {name: "cluster", cluster: true, addrs: c.Addrs()}} {
		t.Run(up.name, func(t *testing.T) {
			addr := fileSidecar(t, up, []routing.Entry{{Key: key, Source: routing.SourceDetected,
				Split: &routing.Split{Generations: []routing.Generation{{FromEpoch: 0, Shards: 4}}}}})
			reset := func(t *testing.T) {
				direct(t, up, func(c redis.UniversalClient) error { return c.Del(context.Background(), key, other).Err() })
			}
			// after checks that nothing of the transaction ran: the plain
			// INCR after it is the key's first.
			after := func(t *testing.T, lib string, v int64) {
				t.Helper()
				if v != 1 {
					t.Errorf("%s: INCR %s after the aborted transaction = %d, want 1: part of it ran", lib, other, v)
				}
				if got := directGet(t, up, key); got != "" {
					t.Errorf("%s: %s = %q after the aborted transaction, want none", lib, key, got)
				}
			}

			t.Run("go", func(t *testing.T) {
				reset(t)
				ctx := context.Background()
				var c redis.UniversalClient
				if up.cluster {
					c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
				} else {
					c = redis.NewClient(&redis.Options{Addr: addr})
				}
				defer c.Close()
				began := time.Now()
				cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, other)
					p.Append(ctx, key, "x")
					p.Incr(ctx, other)
					return nil
				})
				took := time.Since(began)
				t.Logf("go-redis TxPipeline via the sidecar (%s): %v after %v", up.name, err, took)
				// Client returns EXEC's error; ClusterClient its commands'
				// first (osscluster.go processTxPipeline: cmdsFirstErr).
				want := execAbort
				if up.cluster {
					want = refusal
				}
				if err == nil || err.Error() != want {
					t.Errorf("go: TxPipeline with a refused command: %v, want %q", err, want)
				}
				if took > time.Second {
					t.Errorf("go: the transaction took %v to fail: the client waited for replies", took)
				}
				if e := cmds[1].Err(); e == nil || e.Error() != refusal {
					t.Errorf("go: the refused APPEND got %v, want %q", e, refusal)
				}
				v, err := c.Incr(ctx, other).Result()
				if err != nil {
					t.Fatalf("go: INCR after the aborted transaction: %v", err)
				}
				after(t, "go", v)
			})
			t.Run("py", func(t *testing.T) {
				if up.cluster {
					t.Skip("redis-py's RedisCluster has no transactions")
				}
				argv, env := pyArgv(t)
				reset(t)
				var out struct {
					Error, Type string
					After       int64
				}
				runJSON(t, append([]string{argv[0], "testdata/txrefused.py"}, scriptAddr(addr, key, other)...), env, &out)
				t.Logf("redis-py pipeline(transaction=True) via the sidecar (%s): %s %q", up.name, out.Type, out.Error)
				// redis-py raises the first queued error in place of
				// EXECABORT, prefixed with the command's place and without
				// its "ERR ".
				want := strings.TrimPrefix(refusal, "ERR ")
				if out.Type != "ResponseError" || !strings.HasSuffix(out.Error, want) {
					t.Errorf("py: the transaction raised %s %q, want ResponseError ending %q", out.Type, out.Error, want)
				}
				after(t, "py", out.After)
			})
			t.Run("js", func(t *testing.T) {
				argv, env := jsArgv(t)
				reset(t)
				cl := "0"
				if up.cluster {
					cl = "1"
				}
				var out struct {
					Error    string
					Previous []string
					After    int64
				}
				host, port, _ := strings.Cut(addr, ":")
				runJSON(t, []string{argv[0], "testdata/txrefused.js", host, port, cl, key, other}, env, &out)
				t.Logf("ioredis multi via the sidecar (%s): %q, previous %q", up.name, out.Error, out.Previous)
				if out.Error != execAbort || len(out.Previous) != 1 || out.Previous[0] != refusal {
					t.Errorf("js: multi rejected with %q (previous %q), want %q with %q", out.Error, out.Previous, execAbort, refusal)
				}
				after(t, "js", out.After)
			})
		})
	}
}

// scriptAddr is a script's host, port and further arguments.
func scriptAddr(addr string, rest ...string) []string {
	host, port, _ := strings.Cut(addr, ":")
	return append([]string{host, port}, rest...)
}

// runJSON runs a client script (30 s at most: a client waiting for replies
// that never come is killed) and decodes the one JSON line it prints.
func runJSON(t *testing.T, argv, env []string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v; stderr:\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s printed %q: %v", strings.Join(argv, " "), b, err)
	}
}
