package proxy_test

import (
	"bufio"
	"net"
	"testing"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/proxytest"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// BenchmarkStatelessClients measures what the shared mode (shared.go) is
// kept for where the event loop does not run (--event-loop=false, no
// epoll): 50 concurrent clients, each sending one GET and waiting for its
// reply (depth 1, as most application clients do), through sessions on a
// few shared connections and through sessions with a connection each, side
// by side on the same Redis. ns/op is per GET across all clients; compare
// the two (docs/proxy-internals.md, Who serves a client).
func BenchmarkStatelessClients(b *testing.B) {
	for _, tc := range []struct {
		name   string
		shared int
	}{
		{"sessions-shared", 0},
		{"sessions-dedicated", -1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := redistest.Standalone(b)
			addr, _ := proxytest.Start(b, proxy.Config{Upstreams: []string{srv.Addr}, SharedConns: tc.shared, NoEventLoop: true})
			req := []byte("*2\r\n$3\r\nGET\r\n$8\r\nkey:0001\r\n")
			b.SetParallelism(25) // 50 clients on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				r := resp.NewReader(bufio.NewReader(c), 4096, resp.DefaultLimits())
				var rep resp.Reply
				for pb.Next() {
					if _, err := c.Write(req); err != nil {
						b.Error(err)
						return
					}
					if err := r.ReadReply(&rep); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
