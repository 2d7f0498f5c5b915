package proxy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// loadKeyspace writes the same keys, of every type, some with a TTL, with c.
func loadKeyspace(t *testing.T, c redis.Cmdable) {
	t.Helper()
	ctx := context.Background()
	pipe := c.Pipeline()
	for i := range 400 {
		switch i % 4 {
		case 0:
			pipe.Set(ctx, fmt.Sprintf("user:%d", i), i, 0)
		case 1:
			pipe.HSet(ctx, fmt.Sprintf("hash:%d", i), "f", i)
		case 2:
			pipe.RPush(ctx, fmt.Sprintf("list:%d", i), i)
		case 3:
			pipe.Set(ctx, fmt.Sprintf("ttl:%d", i), i, time.Hour)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// scanAll runs a full SCAN iteration and returns the keys seen (once each).
func scanAll(t *testing.T, c *redis.Client, opts ...any) []string {
	t.Helper()
	ctx := context.Background()
	seen := map[string]bool{}
	cursor := "0"
	for calls := 0; ; calls++ {
		if calls > 10000 {
			t.Fatalf("SCAN %v did not end in 10000 calls", opts)
		}
		v, err := c.Do(ctx, append([]any{"SCAN", cursor}, opts...)...).Slice()
		if err != nil {
			t.Fatalf("SCAN %s %v: %v", cursor, opts, err)
		}
		cursor = v[0].(string)
		for _, k := range v[1].([]any) {
			seen[k.(string)] = true
		}
		if cursor == "0" {
			t.Logf("SCAN %v: %d keys in %d calls", opts, len(seen), calls+1)
			break
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedStrings(t *testing.T, c *redis.StringSliceCmd) []string {
	t.Helper()
	v, err := c.Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(v)
	return v
}

// keyspaceCounts is INFO keyspace without avg_ttl (an estimate that
// differs between servers holding the same keys).
func keyspaceCounts(t *testing.T, c redis.Cmdable) string {
	t.Helper()
	s, err := c.Info(context.Background(), "keyspace").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\r\n") {
		var kept []string
		for _, f := range strings.Split(line, ",") {
			if !strings.HasPrefix(f, "avg_ttl=") {
				kept = append(kept, f)
			}
		}
		out = append(out, strings.Join(kept, ","))
	}
	return strings.Join(out, "\n")
}

// TestNodeWideCommandsCluster checks KEYS, SCAN, DBSIZE, RANDOMKEY, INFO
// keyspace, FLUSHDB and FLUSHALL through a cluster-mode proxy against one
// standalone Redis holding the same keys.
func TestNodeWideCommandsCluster(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	oracleSrv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true})
	ctx := context.Background()
	oracle := redis.NewClient(&redis.Options{Addr: oracleSrv.Addr})
	defer oracle.Close()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			pc := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
			defer pc.Close()
			oracle := redis.NewClient(&redis.Options{Addr: oracleSrv.Addr, Protocol: proto})
			defer oracle.Close()
			must(t, pc.FlushDB(ctx).Err())
			must(t, oracle.FlushDB(ctx).Err())
			loadKeyspace(t, pc)
			loadKeyspace(t, oracle)
			for _, a := range cl.Addrs() {
				n, err := redis.NewClient(&redis.Options{Addr: a}).DBSize(ctx).Result()
				if err != nil || n < 50 {
					t.Fatalf("node %s holds %d keys (%v): the keys are not spread", a, n, err)
				}
			}

			if got, want := pc.DBSize(ctx).Val(), oracle.DBSize(ctx).Val(); got != want || got != 400 {
				t.Errorf("DBSIZE = %d, oracle %d", got, want)
			}
			for _, pattern := range []string{"*", "user:*", "*:1?", "nomatch*"} {
				got := sortedStrings(t, pc.Keys(ctx, pattern))
				want := sortedStrings(t, oracle.Keys(ctx, pattern))
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("KEYS %s (-oracle +proxy):\n%s", pattern, diff)
				}
			}
			for _, opts := range [][]any{nil, {"COUNT", 7}, {"MATCH", "user:*"}, {"TYPE", "hash"},
				{"MATCH", "*:1*", "COUNT", 1000, "TYPE", "string"}, {"TYPE", "list", "COUNT", 3}} {
				want := scanAll(t, oracle, opts...)
				if diff := cmp.Diff(want, scanAll(t, pc, opts...)); diff != "" || len(want) == 0 {
					t.Errorf("SCAN %v (-oracle +proxy):\n%s", opts, diff)
				}
			}
			if got, want := keyspaceCounts(t, pc), keyspaceCounts(t, oracle); got != want {
				t.Errorf("INFO keyspace = %q, oracle %q", got, want)
			}
			all := map[string]bool{}
			for _, k := range oracle.Keys(ctx, "*").Val() {
				all[k] = true
			}
			nodes := map[int]bool{}
			for range 60 {
				k, err := pc.RandomKey(ctx).Result()
				if err != nil || !all[k] {
					t.Fatalf("RANDOMKEY = %q, %v: not a key of the keyspace", k, err)
				}
				nodes[clusterNodeOf(k)] = true
			}
			if len(nodes) < 2 {
				t.Errorf("60 RANDOMKEYs all came from one node's slots")
			}

			// Errors are Redis' own.
			for _, cmd := range [][]any{{"SCAN", "abc"}, {"SCAN", "0", "COUNT", "x"}, {"SCAN", "0", "TYPE"},
				{"SCAN"}, {"KEYS"}, {"DBSIZE", "x"}, {"FLUSHDB", "LATER"}, {"FLUSHALL", "ASYNC", "x"}, {"RANDOMKEY", "x"}} {
				_, gotErr := pc.Do(ctx, cmd...).Result()
				_, wantErr := oracle.Do(ctx, cmd...).Result()
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || wantErr == nil {
					t.Errorf("%v: proxy %v, oracle %v", cmd, gotErr, wantErr)
				}
			}
			for _, flush := range [][]any{{"FLUSHDB"}, {"FLUSHDB", "SYNC"}, {"FLUSHALL", "ASYNC"}, {"flushall", "sync"}} {
				loadKeyspace(t, pc)
				got, err := pc.Do(ctx, flush...).Result()
				if err != nil || got != "OK" {
					t.Fatalf("%v = %v, %v", flush, got, err)
				}
				eventually.True(t, 10*time.Second, "every master empty", func() bool {
					for _, a := range cl.Addrs() {
						if n, err := redis.NewClient(&redis.Options{Addr: a}).DBSize(ctx).Result(); err != nil || n != 0 {
							return false
						}
					}
					return true
				})
			}
			if v, err := pc.RandomKey(ctx).Result(); err != redis.Nil {
				t.Errorf("RANDOMKEY on an empty cluster = %q, %v; want nil", v, err)
			}
			if got := scanAll(t, pc); len(got) != 0 {
				t.Errorf("SCAN of an empty cluster = %v", got)
			}
			if n := pc.DBSize(ctx).Val(); n != 0 {
				t.Errorf("DBSIZE after FLUSHALL = %d", n)
			}
		})
	}
}

func clusterNodeOf(key string) int { return int(routing.Slot(key)) * 3 / 16384 }

// TestScanClusterUnderChurn: full SCAN iterations through the proxy, while
// other keys are added and removed, return every key present throughout
// (Redis' SCAN guarantee) and nothing that never existed.
func TestScanClusterUnderChurn(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true})
	ctx := context.Background()
	pc := redis.NewClient(&redis.Options{Addr: addr})
	defer pc.Close()
	must(t, pc.FlushAll(ctx).Err())
	pipe := pc.Pipeline()
	stable := map[string]bool{}
	for i := range 1000 {
		k := fmt.Sprintf("stable:%d", i)
		stable[k] = true
		if i%2 == 0 {
			pipe.Set(ctx, k, i, 0)
		} else {
			pipe.SAdd(ctx, k, i)
		}
	}
	_, err := pipe.Exec(ctx)
	must(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	churned := 0
	go func() {
		defer wg.Done()
		churn := redis.NewClient(&redis.Options{Addr: addr})
		defer churn.Close()
		deadline := time.Now().Add(30 * time.Second)
		// Bounded: at most 20000 writes or 30 s, whichever comes first.
		for i := 0; i < 20000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("churn:%d", i%500)
			if i%3 == 2 {
				churn.Del(ctx, k)
			} else {
				churn.Set(ctx, k, i, 0)
			}
			churned++
		}
	}()
	for _, opts := range [][]any{{"COUNT", 10}, nil, {"MATCH", "stable:*", "COUNT", 50}, {"TYPE", "set", "COUNT", 20}} {
		got := scanAll(t, pc, opts...)
		seen := map[string]bool{}
		for _, k := range got {
			seen[k] = true
			if !stable[k] && !strings.HasPrefix(k, "churn:") {
				t.Errorf("SCAN %v returned %q, never written", opts, k)
			}
		}
		for k := range stable {
			typed := opts != nil && opts[0] == "TYPE" // sets only: the odd ones
			if (!typed || lastDigitOdd(k)) && !seen[k] {
				t.Errorf("SCAN %v missed %q, present throughout", opts, k)
			}
			if typed && seen[k] && !lastDigitOdd(k) {
				t.Errorf("SCAN TYPE set returned the string %q", k)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d churn writes during the iterations", churned)
	if churned == 0 {
		t.Fatal("no churn happened during the iterations")
	}
}

func lastDigitOdd(k string) bool { return (k[len(k)-1]-'0')%2 == 1 }

// TestScanCursorOfAnotherSlotMapRefused: a cursor taken before the slot
// map changed is refused, never continued on the wrong node.
func TestScanCursorOfAnotherSlotMapRefused(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true})
	ctx := context.Background()
	pc := redis.NewClient(&redis.Options{Addr: addr})
	defer pc.Close()
	for i := range 300 {
		must(t, pc.Set(ctx, fmt.Sprintf("k:%d", i), i, 0).Err())
	}
	v, err := pc.Do(ctx, "SCAN", "0", "COUNT", 5).Slice()
	must(t, err)
	cursor := v[0].(string)
	if _, err := pc.Do(ctx, "SCAN", cursor).Result(); err != nil {
		t.Fatalf("SCAN %s before the slot map changed: %v", cursor, err)
	}
	if _, err := pc.Do(ctx, "SCAN", "12345").Result(); err == nil || !strings.Contains(err.Error(), "is not one this proxy made") {
		t.Errorf("SCAN of a made-up cursor: %v", err)
	}
	key := "k:7"
	redistest.MigrateSlot(t, cl.Addrs(), int(routing.Slot(key)))
	// The proxy learns of the move from the MOVED its next command on
	// the key gets.
	must(t, pc.Get(ctx, key).Err())
	eventually.True(t, 10*time.Second, "old cursor refused", func() bool {
		_, err := pc.Do(ctx, "SCAN", cursor).Result()
		return err != nil && strings.Contains(err.Error(), "start again from 0")
	})
	want := map[string]bool{}
	for i := range 300 {
		want[fmt.Sprintf("k:%d", i)] = true
	}
	got := scanAll(t, pc)
	if len(got) != len(want) {
		t.Errorf("SCAN after the migration: %d keys, want %d", len(got), len(want))
	}
}

// TestNodeWideInClusterTransactionRefused: a cluster transaction runs on
// one master, so node-wide commands cannot be queued in it.
func TestNodeWideInClusterTransactionRefused(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true})
	rc := dialRaw(t, addr)
	rc.must("MULTI")
	v, _ := rc.do("DBSIZE")
	if diff := cmp.Diff(any(resp.Error("ERR heatsink proxy: DBSIZE inside MULTI is not supported in cluster mode (the transaction runs on one master)")), v); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	v, _ = rc.do("SWAPDB", "0", "1")
	if diff := cmp.Diff(any(resp.Error("ERR heatsink proxy: SWAPDB acts on every node of a cluster; run it against each node directly")), v); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Refused at queue time, as Redis refuses a command: EXEC aborts, and
	// the connection is out of the transaction.
	v, _ = rc.do("EXEC")
	if diff := cmp.Diff(any(resp.Error("EXECABORT Transaction discarded because of previous errors.")), v); diff != "" {
		t.Errorf("EXEC after the refused commands (-want +got):\n%s", diff)
	}
	v, _ = rc.do("PING")
	if diff := cmp.Diff(any("PONG"), v); diff != "" {
		t.Errorf("PING after the aborted transaction (-want +got):\n%s", diff)
	}
}

// infoKeyspace is the Keyspace section of an INFO text without avg_ttl,
// and whether the text has a Server section too.
func infoKeyspace(text string) (keyspace string, server bool) {
	var out []string
	in := false
	for _, line := range strings.Split(strings.TrimSpace(text), "\r\n") {
		switch {
		case line == "# Server":
			server = true
		case strings.HasPrefix(line, "# "):
			in = line == "# Keyspace"
		case in && line != "":
			var kept []string
			for _, f := range strings.Split(line, ",") {
				if !strings.HasPrefix(f, "avg_ttl=") {
					kept = append(kept, f)
				}
			}
			out = append(out, strings.Join(kept, ","))
		}
	}
	return strings.Join(out, "\n"), server
}

// TestInfoClusterKeyspace: INFO through a cluster-mode proxy (event loop
// and sessions) has the whole cluster's keyspace, as one Redis holding
// every key would say, in the first master's reply; INFO without the
// Keyspace section is that master's reply as it is.
func TestInfoClusterKeyspace(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	oracleSrv := redistest.Standalone(t)
	ctx := context.Background()
	oracle := redis.NewClient(&redis.Options{Addr: oracleSrv.Addr})
	defer oracle.Close()
	loop, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true})
	sessions, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true, NoEventLoop: true})
	loadKeyspace(t, oracle)
	loadKeyspace(t, redis.NewClient(&redis.Options{Addr: loop}))
	want, _ := infoKeyspace(oracle.Info(ctx, "keyspace").Val())
	if !strings.Contains(want, "keys=400") {
		t.Fatalf("oracle keyspace %q", want)
	}
	for name, addr := range map[string]string{"event loop": loop, "sessions": sessions} {
		for _, proto := range []int{2, 3} {
			pc := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
			for _, sections := range [][]string{nil, {"default"}, {"everything"}, {"server", "keyspace"}} {
				text, err := pc.Info(ctx, sections...).Result()
				got, server := infoKeyspace(text)
				if err != nil || got != want || !server {
					t.Errorf("%s RESP%d INFO %v: keyspace %q (server section %v, %v), want %q", name, proto, sections, got, server, err, want)
				}
			}
			if text := pc.Info(ctx, "memory").Val(); !strings.Contains(text, "used_memory:") || strings.Contains(text, "# Keyspace") {
				t.Errorf("%s RESP%d INFO memory = %q", name, proto, text)
			}
			pc.Close()
		}
	}
}
