package proxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/internal/testing/testpki"
)

// mtlsProxy runs a proxy with its metrics in reg in front of a real Redis
// with tls-auth-clients yes, presenting a client certificate; it returns
// the proxy's address, a plaintext client of the Redis and what stops it.
func mtlsProxy(t *testing.T, reg *prometheus.Registry, cfg proxy.Config) (string, *redis.Client, func()) {
	t.Helper()
	dir := t.TempDir()
	serverCA, clientCA := testpki.NewCA(t, dir, "server-ca"), testpki.NewCA(t, dir, "client-ca")
	tlsAddr, srv := testpki.MTLSRedis(t, dir, serverCA, clientCA)
	cfg.Upstreams, cfg.TLS = []string{tlsAddr}, clientTLS(t, dir, serverCA, clientCA)
	if reg != nil {
		cfg.Registerer = reg
	}
	addr, _ := start(t, cfg)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { direct.Close() })
	return addr, direct, srv.Stop
}

// TestTLSUpstreamServedByEventLoop: with a TLS upstream (client
// certificates required), the event loop serves the clients (its overhead
// histogram, which only the loop observes, counts samples), and every
// family of commands answers as it does from a plaintext Redis directly:
// blocking commands and scripts on the loop's spare connections, and the
// commands that hand a client to a session (MULTI, SELECT, CLIENT) on a
// presented connection that the session goes on with over TLS.
func TestTLSUpstreamServedByEventLoop(t *testing.T) {
	skipShort(t)
	for _, protocol := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			addr, _, _ := mtlsProxy(t, reg, proxy.Config{})
			plain := redistest.Standalone(t)
			pc := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
			dc := redis.NewClient(&redis.Options{Addr: plain.Addr, Protocol: protocol})
			t.Cleanup(func() { pc.Close(); dc.Close() })
			ctx := context.Background()
			for i := range 200 {
				// The same keys on both, so that DBSIZE agrees below.
				if err := pc.Set(ctx, fmt.Sprintf("warm:%d", i), i, 0).Err(); err != nil {
					t.Fatalf("SET through the TLS upstream: %v", err)
				}
				dc.Set(ctx, fmt.Sprintf("warm:%d", i), i, 0)
			}
			if n, _ := histogram(t, reg, "heatsink_proxy_command_overhead_seconds"); n == 0 {
				t.Fatal("no command sampled by the event loop: the TLS upstream is not served by it")
			}
			pconn, dconn := pc.Conn(), dc.Conn()
			defer pconn.Close()
			defer dconn.Close()
			got := run(t, pconn, matrix)
			want := run(t, dconn, matrix)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("replies through the TLS proxy differ from direct plaintext (-direct +proxy):\n%s", diff)
			}
		})
	}
}

// TestTLSUpstreamLoadAndLargeValues: concurrent pipelining clients and
// large values through a TLS upstream, then large replies to a client
// that reads late (slowLargeReplies); every reply is the right one.
func TestTLSUpstreamLoadAndLargeValues(t *testing.T) {
	skipShort(t)
	addr, direct, _ := mtlsProxy(t, nil, proxy.Config{})
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	if err := direct.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	const clients, rounds, depth = 8, 50, 16
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer rc.Close()
			for r := range rounds {
				pipe := rc.Pipeline()
				for d := range depth {
					pipe.Set(ctx, fmt.Sprintf("c%d:%d", c, d), fmt.Sprintf("%d/%d", r, d), 0)
				}
				gets := make([]*redis.StringCmd, depth)
				for d := range depth {
					gets[d] = pipe.Get(ctx, fmt.Sprintf("c%d:%d", c, d))
				}
				if _, err := pipe.Exec(ctx); err != nil {
					errs <- err
					return
				}
				for d, g := range gets {
					if want := fmt.Sprintf("%d/%d", r, d); g.Val() != want {
						errs <- fmt.Errorf("client %d: GET c%d:%d = %q, want %q", c, c, d, g.Val(), want)
						return
					}
				}
				if r%10 == 0 {
					v, err := rc.Get(ctx, "big").Bytes()
					if err != nil || !bytes.Equal(v, big) {
						errs <- fmt.Errorf("client %d: GET big: %d bytes, %v", c, len(v), err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	slowLargeReplies(t, addr, big, direct)
}

// slowLargeReplies pipelines large GETs and a PING on a client that reads
// nothing until Redis holds output for the proxy (CLIENT LIST's omem, read
// on direct): the loop has stopped reading its upstream connection while
// the client is behind. Then the client reads: the loop resumes the
// connection (over TLS, with records crypto/tls may hold, of which epoll
// knows nothing), and every reply comes whole and in order.
func slowLargeReplies(t *testing.T, addr string, big []byte, direct *redis.Client) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 8
	var req []byte
	for range n {
		req = resp.AppendArgs(req, [][]byte{[]byte("GET"), []byte("big")})
	}
	req = resp.AppendArgs(req, [][]byte{[]byte("PING")})
	if _, err := conn.Write(req); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "Redis holds replies the proxy does not read", func() bool {
		list, err := direct.ClientList(context.Background()).Result()
		return err == nil && regexp.MustCompile(` omem=[1-9]`).MatchString(list)
	})
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	var want []byte
	for range n {
		want = resp.AppendBulk(want, big)
	}
	want = append(want, "+PONG\r\n"...)
	got := make([]byte, len(want))
	if k, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("read %d of %d bytes of large replies: %v", k, len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("large replies read late differ from the values")
	}
}

// TestTLSUpstreamFailureIsAnErrorNotAHang: when the TLS Redis goes away,
// the loop reads end-of-file through crypto/tls and a command gets the
// proxy's error.
func TestTLSUpstreamFailureIsAnErrorNotAHang(t *testing.T) {
	skipShort(t)
	addr, _, stop := mtlsProxy(t, nil, proxy.Config{Timeout: time.Second})
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: time.Minute})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	stop()
	err := c.Get(ctx, "k").Err()
	if err == nil || !strings.Contains(err.Error(), "heatsink proxy") {
		t.Fatalf("GET with the TLS Redis down: %v, want a heatsink proxy error", err)
	}
}

// clientTLS is the proxy's TLS configuration toward servers of serverCA,
// presenting a certificate of clientCA (written in dir) as heatsink.
func clientTLS(tb testing.TB, dir string, serverCA, clientCA *testpki.CA) *tls.Config {
	tb.Helper()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	clientCA.Issue(tb, "heatsink", false, certFile, keyFile)
	tc, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: serverCA.File, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		tb.Fatal(err)
	}
	return tc
}
