package proxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// BenchmarkTLSUpstream compares forwarding to a plaintext upstream (event
// loop, sessions) with a TLS upstream (sessions: the event loop serves
// plaintext upstreams only), one real Redis serving both ports. Each op is a
// pipeline of 16 GETs on one of several client connections (RunParallel).
// The ratio of the TLS row's ns/op to the sessions row's is the cost of TLS.
func BenchmarkTLSUpstream(b *testing.B) {
	caFile, certFile, keyFile := testPKI(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	srv := redistest.Standalone(b, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	tc, err := proxy.ClientTLS(proxy.TLSOptions{CAFile: caFile})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		upstream string
		tls      *tls.Config
		noLoop   bool
	}{
		{"plain/loop", srv.Addr, nil, false},
		{"plain/sessions", srv.Addr, nil, true},
		{"tls/sessions", tlsAddr, tc, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			p, err := proxy.New(proxy.Config{Upstreams: []string{c.upstream}, TLS: c.tls, NoEventLoop: c.noLoop})
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
			defer func() { cancel(); <-done }()
			req := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$8\r\nkey:0001\r\n", 16))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				conn, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Error(err)
					return
				}
				defer conn.Close()
				r := resp.NewReader(bufio.NewReader(conn), 4096, resp.DefaultLimits())
				var rep resp.Reply
				for pb.Next() {
					if _, err := conn.Write(req); err != nil {
						b.Error(err)
						return
					}
					for range 16 {
						if err := r.ReadReply(&rep); err != nil {
							b.Error(err)
							return
						}
					}
				}
			})
		})
	}
}
