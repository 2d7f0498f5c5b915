package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
	"github.com/heatsink-dev/heatsink/routing"
)

// BenchmarkForward measures the forwarding path (a pipeline of 12 GETs and 4
// three-key MGETs per op, on keys not in the routing table, through the
// proxy to a real Redis) for allocations, through the event loop and
// through sessions: the client side below allocates nothing per op, so
// allocs/op is the proxy's. Throughput
// comparisons with direct Redis and twemproxy live in hack/bench.d.
// loop/beside-a-session has another client, idle, handed to a session
// (CLIENT SETNAME): the loop then takes the order of arrivals before it
// writes (loop_arrivals_linux.go).
func BenchmarkForward(b *testing.B) {
	for _, tc := range []struct {
		name    string
		shared  int
		noLoop  bool
		table   int // -1: no engine; n: an engine with n entries, none of them the keys sent
		session bool
	}{
		{"loop", 0, false, -1, false},
		{"loop/beside-a-session", 0, false, -1, true},
		{"sessions-shared", 0, true, -1, false},
		{"sessions-dedicated", -1, true, -1, false},
		{"loop/engine-empty-table", 0, false, 0, false},
		{"loop/engine-1000-entries", 0, false, 1000, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := redistest.Standalone(b)
			cfg := proxy.Config{Upstreams: []string{srv.Addr}, SharedConns: tc.shared, NoEventLoop: tc.noLoop}
			if tc.table >= 0 {
				ec := redis.NewClient(&redis.Options{Addr: srv.Addr})
				defer ec.Close()
				eng := engine.New(ec, engine.Options{})
				defer eng.Close()
				tbl := &routing.Table{SchemaVersion: 1, Version: 1, EpochMillis: 60000}
				for i := range tc.table {
					tbl.Entries = append(tbl.Entries, routing.Entry{Key: fmt.Sprintf("hot:%04d", i), Source: routing.SourceDetected,
						Replicate: &routing.Replicate{Replicas: 2, TTLMillis: 60000}})
				}
				eng.SetTable(tbl)
				cfg.Engine = eng
			}
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
			defer func() { cancel(); <-done }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if tc.session {
				sc, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				defer sc.Close()
				sc.Write([]byte("*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$1\r\ns\r\n"))
				var rep resp.Reply
				if err := resp.NewReader(sc, 4096, resp.DefaultLimits()).ReadReply(&rep); err != nil || string(rep.Raw) != "+OK\r\n" {
					b.Fatalf("CLIENT SETNAME answered %q, %v", rep.Raw, err)
				}
			}
			// GETs and multi-key MGETs: with an engine, MGET looks up each
			// key only when the table is not empty.
			req := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$8\r\nkey:0001\r\n", 12) +
				strings.Repeat("*4\r\n$4\r\nMGET\r\n$8\r\nkey:0001\r\n$8\r\nkey:0002\r\n$8\r\nkey:0003\r\n", 4))
			r := resp.NewReader(bufio.NewReader(c), 4096, resp.DefaultLimits())
			var rep resp.Reply
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				for j := 0; j < 16; j++ {
					if err := r.ReadReply(&rep); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
