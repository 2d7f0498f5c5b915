package proxy_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// Where the event loop runs, the shared mode (shared.go) never runs: a
// client the loop hands to a session gets a connection of its own for every
// hand-over, the three the loop does not write itself included: a large
// value still arriving (streamed, or held whole because its keys follow
// it), a HELLO to a Redis that has no HELLO reply for the loop to give (its
// default user may not run HELLO), and a hand-over the loop cannot write
// (WAIT, CLIENT REPLY: the session answers them); nor do the commands the
// loop runs on a goroutine (an engine command's round trips, INFO), whose
// connection is kept for the next one. With sessions only
// (--event-loop=false) the same steps do open shared connections, so the
// count is the one that would show them.
func TestHandOversUnderTheLoopOpenNoSharedConnection(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	srv := redistest.Standalone(t)
	// A Redis without HELLO (HELLO is exempt from ACLs: renamed away).
	noHello := redistest.Standalone(t, "--rename-command", "HELLO", "HELLO-"+t.Name())
	big := string(valueBytes(2<<20, 7))
	cases := []struct {
		name string
		addr string
		run  func(t *testing.T, c *redis.Client)
	}{
		{"large value streamed", srv.Addr, func(t *testing.T, c *redis.Client) {
			mustSetGet(t, c, "big", big)
		}},
		{"large value held whole", srv.Addr, func(t *testing.T, c *redis.Client) {
			if err := c.MSet(ctx, "m1", big, "m2", "x").Err(); err != nil {
				t.Fatalf("MSET m1 <2 MiB> m2 x: %v", err)
			}
			if v, err := c.Get(ctx, "m1").Result(); err != nil || v != big {
				t.Fatalf("GET m1: %d bytes, %v", len(v), err)
			}
			mustSetGet(t, c, "after", "y")
		}},
		{"HELLO without a HELLO reply", noHello.Addr, func(t *testing.T, c *redis.Client) {
			// go-redis opens with HELLO 3, refused: it goes on in RESP2.
			mustSetGet(t, c, "k", "v")
			if err := c.Do(ctx, "HELLO", "2").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command") {
				t.Fatalf("HELLO 2 to a Redis without HELLO: %v, want Redis' unknown command", err)
			}
			mustSetGet(t, c, "k2", "v2")
		}},
		{"hand-over the loop does not write", srv.Addr, func(t *testing.T, c *redis.Client) {
			if n, err := c.Do(ctx, "WAIT", 0, 0).Int(); err != nil || n != 0 {
				t.Fatalf("WAIT 0 0: %d, %v", n, err)
			}
			mustSetGet(t, c, "w", "1")
		}},
	}
	// A command on a mitigated key the engine serves, with the plain keys'
	// part on the client's path (MGET of a replicated key and a plain one),
	// and one the engine finds malformed (Redis answers it).
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	eng := engine.New(direct, engine.Options{})
	defer eng.Close()
	eng.SetTable(mitigatedTable())
	cases = append(cases, struct {
		name string
		addr string
		run  func(t *testing.T, c *redis.Client)
	}{"engine round trip", srv.Addr, func(t *testing.T, c *redis.Client) {
		mustSetGet(t, c, "page", "p1")
		mustSetGet(t, c, "plain", "x")
		before := connectionsReceived(t, direct)
		for i := range 20 {
			got, err := c.MGet(ctx, "page", "plain").Result()
			if err != nil || len(got) != 2 || got[0] != "p1" || got[1] != "x" {
				t.Fatalf("MGET page plain (%d): %v, %v", i, got, err)
			}
		}
		// The connection of one round trip is kept for the next: 20 take
		// at most a few (the warm pool's refills, and direct's INFO).
		if n := connectionsReceived(t, direct) - before; n > 6 {
			t.Fatalf("20 MGETs served by the engine opened %d connections to Redis, want a few", n)
		}
		if err := c.Do(ctx, "GET", "page", "extra").Err(); err == nil || !strings.Contains(err.Error(), "wrong number of arguments") {
			t.Fatalf("GET page extra: %v, want Redis' arity error", err)
		}
	}})
	// INFO, which the proxy patches (cluster_enabled:1), on a goroutine as
	// an engine command.
	cases = append(cases, struct {
		name string
		addr string
		run  func(t *testing.T, c *redis.Client)
	}{"INFO", srv.Addr, func(t *testing.T, c *redis.Client) {
		for range 3 {
			info, err := c.Info(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_enabled:1") || !strings.Contains(info, "redis_version:") {
				t.Fatalf("INFO: %v, %d bytes without the patched cluster_enabled:1 or Redis' own fields", err, len(info))
			}
		}
	}})
	for _, tc := range cases {
		for _, noLoop := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sessions-only=%v", tc.name, noLoop), func(t *testing.T) {
				cfg := proxy.Config{Upstreams: []string{tc.addr}, NoEventLoop: noLoop, MaxBuffered: 8 << 20}
				if tc.name == "engine round trip" {
					cfg.Engine = eng
				}
				addr, p := start(t, cfg)
				c := redis.NewClient(&redis.Options{Addr: addr})
				defer c.Close()
				tc.run(t, c)
				n := p.SharedDials()
				if !noLoop && n != 0 {
					t.Fatalf("the event loop's hand-over opened %d shared connections, want 0", n)
				}
				if noLoop && n == 0 {
					t.Fatal("sessions only opened no shared connection: the count does not see them")
				}
			})
		}
	}
}

func mustSetGet(t *testing.T, c *redis.Client, key, val string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Set(ctx, key, val, 0).Err(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
	if v, err := c.Get(ctx, key).Result(); err != nil || v != val {
		t.Fatalf("GET %s: %d bytes, %v", key, len(v), err)
	}
}

// connectionsReceived is Redis' count of the connections it accepted.
func connectionsReceived(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO stats has no total_connections_received")
	return 0
}

// A client connection the event loop cannot take (not a socket it can
// duplicate: here a listener that wraps its connections) is served by a
// session of its own where the loop runs, not on the shared connections.
func TestClientTheLoopCannotTakeOpensNoSharedConnection(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	p, err := proxy.New(proxy.Config{Upstreams: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, wrapListener{ln}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy Serve: %v", err)
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String()})
	defer c.Close()
	mustSetGet(t, c, "k", "v")
	if n := p.SharedDials(); n != 0 {
		t.Fatalf("a client the loop could not take opened %d shared connections, want 0", n)
	}
}

// wrapListener hands out connections that are not syscall.Conn.
type wrapListener struct{ net.Listener }

type wrappedConn struct{ net.Conn }

func (l wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return wrappedConn{c}, nil
}
