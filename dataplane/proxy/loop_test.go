package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// These tests aim at the event loop that serves standalone clients (on
// Linux): hand-off to a session in the middle of a pipeline, a client that
// reads slowly, a client that half-closes, and engine commands between
// forwarded ones. Each sends the same bytes to Redis directly and through
// the proxy and compares the replies byte for byte.

// exchange writes cmds in one write, half-closes, and returns every byte
// the server answers before it closes the connection.
func exchange(t *testing.T, addr string, cmds ...[]any) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b []byte
	for _, cmd := range cmds {
		args := make([][]byte, len(cmd))
		for i, a := range cmd {
			args[i] = fmt.Append(nil, a)
		}
		b = resp.AppendArgs(b, args)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard, not a bound
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading replies: %v", err)
	}
	return got
}

// replies splits a reply stream into its replies, rendered.
func replies(t *testing.T, b []byte) []string {
	t.Helper()
	r := resp.NewReader(bytes.NewReader(b), 4096, resp.DefaultLimits())
	var out []string
	for {
		var rep resp.Reply
		if err := r.ReadReply(&rep); err != nil {
			if err != io.EOF {
				t.Fatalf("reply %d: %v", len(out), err)
			}
			return out
		}
		out = append(out, string(rep.Raw))
	}
}

func sameReplies(t *testing.T, direct, proxied []byte) {
	t.Helper()
	d, p := replies(t, direct), replies(t, proxied)
	if len(d) != len(p) {
		t.Fatalf("%d replies through the proxy, %d direct:\nproxy:  %q\ndirect: %q", len(p), len(d), p, d)
	}
	for i := range d {
		if d[i] != p[i] {
			t.Fatalf("reply %d: proxy %q, direct %q", i, p[i], d[i])
		}
	}
}

func TestLoopHandsOffInTheMiddleOfAPipeline(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	reg := prometheus.NewRegistry()
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Registerer: reg})
	// Stateless commands, then SELECT (connection state: the client moves to
	// a session of its own) with more commands behind it in the same write.
	script := [][]any{
		{"SET", "k", "db0"}, {"INCR", "n"}, {"GET", "k"},
		{"SELECT", 3}, {"GET", "k"}, {"SET", "k", "db3"}, {"GET", "k"},
		{"SELECT", 0}, {"GET", "k"}, {"INCR", "n"}, {"QUIT"}, {"GET", "never"},
	}
	direct := exchange(t, srv.Addr, script...)
	redis.NewClient(&redis.Options{Addr: srv.Addr}).FlushAll(context.Background())
	sameReplies(t, direct, exchange(t, addr, script...))
	if n := counterSum(t, reg, "heatsink_proxy_dedicated_sessions_total"); n != 1 {
		t.Fatalf("dedicated sessions = %v, want 1 (the client that sent SELECT)", n)
	}
}

func TestLoopHalfClosedClientGetsEveryReply(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	var script [][]any
	for i := range 5000 {
		script = append(script, []any{"INCR", "c"}, []any{"SET", fmt.Sprint("k", i%7), i}, []any{"GET", fmt.Sprint("k", (i+3)%7)})
	}
	direct := exchange(t, srv.Addr, script...)
	redis.NewClient(&redis.Options{Addr: srv.Addr}).FlushAll(context.Background())
	sameReplies(t, direct, exchange(t, addr, script...))
}

// A client that sends a large pipeline and does not read its replies for a
// while must neither lose any nor hold up other clients.
func TestLoopSlowReaderDoesNotStallOthers(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	ctx := context.Background()
	big := strings.Repeat("v", 64<<10)
	if err := redis.NewClient(&redis.Options{Addr: srv.Addr}).Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	const n = 400 // 25 MiB of replies: far more than the socket buffers hold
	var b []byte
	for range n {
		b = resp.AppendArgs(b, [][]byte{[]byte("GET"), []byte("big")})
	}
	if _, err := slow.Write(b); err != nil {
		t.Fatal(err)
	}
	// Meanwhile another client is served.
	other := redis.NewClient(&redis.Options{Addr: addr})
	defer other.Close()
	for i := range 100 {
		if err := other.Set(ctx, "other", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := other.Get(ctx, "other").Int(); err != nil || v != i {
			t.Fatalf("other client while one is not reading: %d, %v", v, err)
		}
	}
	slow.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	r := resp.NewReader(slow, 64<<10, resp.DefaultLimits())
	for i := range n {
		var rep resp.Reply
		if err := r.ReadReply(&rep); err != nil {
			t.Fatalf("reply %d of %d: %v", i, n, err)
		}
		if rep.Type != '$' || len(rep.Raw) != len(big)+len("$65536\r\n\r\n") {
			t.Fatalf("reply %d: %.40q..., want the 64 KiB value", i, rep.Raw)
		}
	}
}

// Engine commands (a cached key) between forwarded writes of the same key
// see every write before them: the cache never answers with a value older
// than the client's own last write.
func TestLoopEngineCommandsKeepPipelineOrder(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	eng, ec := cachedHot(t, srv.Addr)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, Engine: eng})
	var script [][]any
	for i := range 200 {
		script = append(script, []any{"SET", "hot", i}, []any{"GET", "hot"}, []any{"GET", "hot"},
			[]any{"APPEND", "hot", "x"}, []any{"GET", "hot"}, []any{"INCR", "cold"}, []any{"MGET", "hot", "cold"})
	}
	direct := exchange(t, srv.Addr, script...)
	ec.FlushAll(context.Background())
	sameReplies(t, direct, exchange(t, addr, script...))
}

// When Redis drops the proxy's upstream connection, the commands in flight
// get an error reply and the next ones go over a new connection.
func TestLoopReconnectsAfterUpstreamLoss(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		// Every connection but this one: the proxy's upstream connections.
		killed, err := direct.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Result()
		if err != nil || killed == 0 {
			t.Fatalf("round %d: CLIENT KILL: %d, %v", round, killed, err)
		}
		var got string
		for attempt := 0; got != "v"; attempt++ {
			if attempt == 100 {
				t.Fatalf("round %d: no successful GET after the upstream connection was lost", round)
			}
			v, err := c.Get(ctx, "k").Result()
			switch {
			case err == nil:
				got = v
			case !strings.Contains(err.Error(), "heatsink proxy: upstream"):
				t.Fatalf("round %d: GET after the connection loss: %v, want a heatsink proxy error or the value", round, err)
			}
		}
	}
}

// A pipeline spread over the three masters of a cluster: the replies come
// back from each node in its own time, and the client gets them in the
// order it sent the commands.
func TestLoopClusterPipelineKeepsOrderAcrossNodes(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	addr, _ := start(t, proxy.Config{Upstreams: cl.Addrs()[:1], Cluster: true})
	const n = 3000
	var script [][]any
	var want []string
	for i := range n {
		k := fmt.Sprint("spread:", i)
		script = append(script, []any{"SET", k, i}, []any{"APPEND", k, "x"}, []any{"GET", k})
		v := fmt.Sprint(i, "x")
		want = append(want, "+OK\r\n", fmt.Sprintf(":%d\r\n", len(v)), fmt.Sprintf("$%d\r\n%s\r\n", len(v), v))
	}
	got := replies(t, exchange(t, addr, script...))
	if len(got) != len(want) {
		t.Fatalf("%d replies, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("reply %d = %q, want %q", i, got[i], want[i])
		}
	}
	for _, a := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: a})
		n, err := c.DBSize(context.Background()).Result()
		c.Close()
		if err != nil || n == 0 {
			t.Fatalf("master %s holds %d keys (%v): the pipeline did not span every node", a, n, err)
		}
	}
}
