package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/heatsink-dev/heatsink/internal/redistest"
	"github.com/heatsink-dev/heatsink/proxy"
	"github.com/heatsink-dev/heatsink/resp"
)

// BenchmarkForward measures the forwarding path (a pipeline of 16 GETs per
// op through the proxy to a real Redis) for allocations: the client side
// below allocates nothing per op, so allocs/op is the proxy's. Throughput
// comparisons with direct Redis and twemproxy live in hack/bench.d.
func BenchmarkForward(b *testing.B) {
	for _, shared := range []int{0, -1} {
		b.Run(fmt.Sprintf("shared=%d", shared), func(b *testing.B) {
			srv := redistest.Standalone(b)
			p, err := proxy.New(proxy.Config{Upstreams: []string{srv.Addr}, SharedConns: shared})
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
			req := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$8\r\nkey:0001\r\n", 16))
			r := resp.NewReader(bufio.NewReader(c), 4096, resp.DefaultLimits)
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
