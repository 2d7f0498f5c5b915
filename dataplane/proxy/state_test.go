package proxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// rawClient speaks RESP to the proxy one command at a time, so a test sees
// exactly which reply (or EOF) each command gets.
type rawClient struct {
	t *testing.T
	c net.Conn
	r *resp.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute))
	return &rawClient{t: t, c: c, r: resp.NewReader(c, 4096, resp.Limits{})}
}

// do sends args and returns the reply, or the read error.
func (rc *rawClient) do(args ...string) (any, error) {
	rc.t.Helper()
	bs := make([][]byte, len(args))
	for i, a := range args {
		bs[i] = []byte(a)
	}
	if _, err := rc.c.Write(resp.AppendArgs(nil, bs)); err != nil {
		return nil, err
	}
	return rc.r.ReadValue()
}

func (rc *rawClient) must(args ...string) any {
	rc.t.Helper()
	v, err := rc.do(args...)
	if err != nil {
		rc.t.Fatalf("%v: %v", args, err)
	}
	if e, ok := v.(resp.Error); ok {
		rc.t.Fatalf("%v: %v", args, e)
	}
	return v
}

// killUpstream closes the proxy's upstream connection of a dedicated
// session, as a Redis restart or failover would.
func killUpstream(t *testing.T, rc *rawClient, direct *redis.Client) {
	t.Helper()
	id, ok := rc.must("CLIENT", "ID").(int64)
	if !ok {
		t.Fatal("CLIENT ID: not an integer")
	}
	if err := direct.Do(context.Background(), "CLIENT", "KILL", "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestReconnectReplaysOnlyLatestState(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	if err := direct.Do(ctx, "SELECT", 3).Err(); err != nil {
		t.Fatal(err)
	}
	c3 := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	defer c3.Close()
	if err := c3.Set(ctx, "where", "db3", 0).Err(); err != nil {
		t.Fatal(err)
	}

	rc := dialRaw(t, addr)
	// Far more SELECTs than any bound on remembered commands: only the
	// last one matters.
	for i := range 100 {
		rc.must("SELECT", strconv.Itoa(i%8))
	}
	rc.must("SELECT", "3")
	killUpstream(t, rc, direct)
	// The command in flight when the connection died gets an error (or,
	// if the kill raced ahead of it, a reply); the next one reconnects.
	_, _ = rc.do("PING")
	if v, _ := rc.must("GET", "where").([]byte); string(v) != "db3" {
		t.Fatalf("GET after reconnect = %q, want the value in db 3", v)
	}
}

func TestLostUpstreamWithClientStateClosesClient(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()

	for _, state := range [][]string{
		{"CLIENT", "SETNAME", "app"},
		{"CLIENT", "TRACKING", "on"},
		{"MULTI"},
		{"WATCH", "k"},
	} {
		t.Run(strings.Join(state, " "), func(t *testing.T) {
			rc := dialRaw(t, addr)
			rc.must("SELECT", "0") // a dedicated upstream connection
			if state[0] == "MULTI" {
				killUpstreamThen(t, rc, direct, state)
			} else {
				rc.must(state...)
				killUpstream(t, rc, direct)
			}
			v, err := rc.do("PING")
			if err == nil {
				if _, ok := v.(resp.Error); !ok {
					t.Fatalf("PING after the upstream died with client state: %v, want an error reply", v)
				}
				v, err = rc.do("PING")
			}
			if !errors.Is(err, io.EOF) && !isReset(err) {
				t.Fatalf("client connection still open after its state was lost: %v, %v", v, err)
			}
		})
	}

	// Without such state the session reconnects (replaying SELECT).
	rc := dialRaw(t, addr)
	rc.must("SELECT", "0")
	killUpstream(t, rc, direct)
	_, _ = rc.do("PING")
	if v := rc.must("PING"); v != "PONG" {
		t.Fatalf("PING after reconnect = %v", v)
	}
}

// killUpstreamThen learns the upstream's id, opens state (MULTI, which
// queues CLIENT ID instead of running it) and kills the upstream.
func killUpstreamThen(t *testing.T, rc *rawClient, direct *redis.Client, state []string) {
	t.Helper()
	id, _ := rc.must("CLIENT", "ID").(int64)
	rc.must(state...)
	if err := direct.Do(context.Background(), "CLIENT", "KILL", "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
		t.Fatal(err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}

// A client bulk over Redis' limit (512 MiB, proto-max-bulk-len) is refused
// at the header, before any payload is buffered, with Redis' own error.
func TestClientBulkLimit(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	rc := dialRaw(t, addr)
	if _, err := rc.c.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + strconv.Itoa(512<<20+1) + "\r\n")); err != nil {
		t.Fatal(err)
	}
	v, err := rc.r.ReadValue()
	if e, ok := v.(resp.Error); err != nil || !ok || string(e) != "ERR Protocol error: invalid bulk length" {
		t.Fatalf("reply to an oversized bulk: %v, %v", v, err)
	}
	if _, err := rc.r.ReadValue(); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("connection still open after a protocol error: %v", err)
	}
}

// A refused AUTH leaves the connection authenticated as before, in Redis;
// the proxy must not replay it on the next upstream connection.
func TestRefusedAuthIsNotReplayed(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	if err := direct.Do(ctx, "ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, addr)
	rc.must("AUTH", "alice", "pw")
	if v, err := rc.do("AUTH", "alice", "wrong"); err != nil {
		t.Fatal(err)
	} else if _, refused := v.(resp.Error); !refused {
		t.Fatalf("AUTH with a wrong password: %v, want an error reply", v)
	}
	if v, _ := rc.must("ACL", "WHOAMI").([]byte); string(v) != "alice" {
		t.Fatalf("ACL WHOAMI after a refused AUTH = %q, want alice (Redis keeps the user)", v)
	}
	killUpstream(t, rc, direct)
	_, _ = rc.do("PING") // in flight when the connection died: an error or a reply
	if v, _ := rc.must("ACL", "WHOAMI").([]byte); string(v) != "alice" {
		t.Fatalf("ACL WHOAMI after reconnecting = %q, want alice: the refused AUTH was replayed", v)
	}
}
