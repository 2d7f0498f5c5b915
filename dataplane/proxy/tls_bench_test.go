package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/testpki"
)

// BenchmarkTLSUpstream sets a proxy in front of a real Redis' TLS port
// (tls-auth-clients yes, with a client certificate) beside one in front of
// the same Redis' plaintext port, in the same run: each b.N is one round in
// which every target serves the same load in turn (the order rotated each
// round), and the metrics are each target's median throughput and its
// ratio to plaintext. Targets: plain (event loop), tls (event loop, running
// crypto/tls itself), tls-sessions (Config.NoEventLoop: a goroutine per
// client). Load: 16 clients, GET or SET of random keys, pipelines of
// depth 1 or 16. hack/bench.d/33-proxy-tls.sh measures the same with
// redis-benchmark and 50 clients.
func BenchmarkTLSUpstream(b *testing.B) {
	dir := b.TempDir()
	serverCA, clientCA := testpki.NewCA(b, dir, "server-ca"), testpki.NewCA(b, dir, "client-ca")
	tlsAddr, srv := testpki.MTLSRedis(b, dir, serverCA, clientCA)
	tc := clientTLS(b, dir, serverCA, clientCA)
	targets := []struct {
		name string
		cfg  proxy.Config
	}{
		{"plain", proxy.Config{Upstreams: []string{srv.Addr}}},
		{"tls", proxy.Config{Upstreams: []string{tlsAddr}, TLS: tc}},
		{"tls-sessions", proxy.Config{Upstreams: []string{tlsAddr}, TLS: tc, NoEventLoop: true}},
	}
	addrs := make([]string, len(targets))
	for i, tg := range targets {
		addrs[i] = benchProxy(b, tg.cfg)
	}
	for _, cmd := range []string{"GET", "SET"} {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/depth=%d", cmd, depth), func(b *testing.B) {
				const clients, perClient = 16, 2048
				rates := make([][]float64, len(targets))
				for round := 0; round < b.N; round++ {
					for k := range targets {
						i := (round + k) % len(targets)
						rates[i] = append(rates[i], tlsLoad(b, addrs[i], cmd, depth, clients, perClient))
					}
				}
				plain := median(rates[0])
				for i, tg := range targets {
					m := median(rates[i])
					b.ReportMetric(m, tg.name+"-ops/s")
					if i > 0 {
						b.ReportMetric(m/plain, tg.name+"/plain")
					}
				}
			})
		}
	}
}

// benchProxy serves a proxy with cfg until the benchmark ends.
func benchProxy(b *testing.B, cfg proxy.Config) string {
	b.Helper()
	p, err := proxy.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	b.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// tlsLoad runs clients connections, each sending perClient commands in
// pipelines of depth, and returns the commands served per second.
func tlsLoad(b *testing.B, addr, cmd string, depth, clients, perClient int) float64 {
	b.Helper()
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer conn.Close()
			r := resp.NewReader(bufio.NewReader(conn), 4096, resp.DefaultLimits())
			var rep resp.Reply
			var req []byte
			for sent := 0; sent < perClient; sent += depth {
				req = req[:0]
				for d := range depth {
					key := fmt.Appendf(nil, "key:%d:%d", c, (sent+d)%1000)
					if cmd == "GET" {
						req = resp.AppendArgs(req, [][]byte{[]byte("GET"), key})
					} else {
						req = resp.AppendArgs(req, [][]byte{[]byte("SET"), key, []byte("xxx")})
					}
				}
				if _, err := conn.Write(req); err != nil {
					b.Error(err)
					return
				}
				for range depth {
					if err := r.ReadReply(&rep); err != nil || rep.IsError() {
						b.Errorf("%s: %v %s", cmd, err, rep.Line)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return float64(clients*perClient) / time.Since(start).Seconds()
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
