package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestSubscribedClientPipe: a subscribed client's input, read by the
// event loop (or by its session with sessions only), reaches Redis whole
// and its output comes back whole: a SUBSCRIBE larger than one read of
// the loop (many channels), a message larger than the proxy passes on in
// one piece, a PING; and a client that hangs up ends its subscriptions
// in Redis, as it would directly.
func TestSubscribedClientPipe(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	for _, noLoop := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoEventLoop=%v", noLoop), func(t *testing.T) {
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, NoEventLoop: noLoop})
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Minute))
			r := resp.NewReader(bufio.NewReader(c), 4096, resp.ReplyLimits())
			var rep resp.Reply
			read := func() string {
				t.Helper()
				if err := r.ReadReply(&rep); err != nil {
					t.Fatal(err)
				}
				return string(rep.Raw)
			}
			args := [][]byte{[]byte("SUBSCRIBE"), []byte("pipe:first")}
			const many = 5000 // about 150 KB of command
			for i := range many {
				args = append(args, []byte(fmt.Sprintf("pipe:channel-name-%06d", i)))
			}
			// Sent once subscribed, so the loop reads it as a piped client.
			if _, err := c.Write(resp.AppendArgs(nil, args[:2])); err != nil {
				t.Fatal(err)
			}
			if f := read(); !strings.Contains(f, "pipe:first") {
				t.Fatalf("SUBSCRIBE answered %q", f)
			}
			if _, err := c.Write(resp.AppendArgs(nil, append([][]byte{args[0]}, args[2:]...))); err != nil {
				t.Fatal(err)
			}
			for i := range many {
				if f := read(); !strings.Contains(f, fmt.Sprintf("channel-name-%06d", i)) || !strings.Contains(f, fmt.Sprintf(":%d\r\n", i+2)) {
					t.Fatalf("confirmation %d: %q", i, f)
				}
			}
			big := strings.Repeat("m", 1<<20)
			if n, err := direct.Publish(ctx, "pipe:channel-name-004999", big).Result(); err != nil || n != 1 {
				t.Fatalf("PUBLISH: %d receivers, %v", n, err)
			}
			if f := read(); !strings.HasSuffix(f, "$1048576\r\n"+big+"\r\n") {
				t.Fatalf("the 1 MiB message came as %d bytes", len(f))
			}
			fmt.Fprint(c, "PING\r\n")
			if f := read(); f != "*2\r\n$4\r\npong\r\n$0\r\n\r\n" {
				t.Fatalf("PING answered %q", f)
			}
			c.Close()
			deadline := time.Now().Add(20 * time.Second)
			for {
				n, err := direct.PubSubNumSub(ctx, "pipe:first").Result()
				if err != nil {
					t.Fatal(err)
				}
				if n["pipe:first"] == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the client hung up and Redis still counts %d subscribers", n["pipe:first"])
				}
				time.Sleep(10 * time.Millisecond) // polling Redis, bounded by the deadline
			}
		})
	}
}

// TestShutdownEndsSubscribedClients: a proxy that stops closes its
// subscribed clients (as Redis closes its clients when it shuts down) and
// its Serve returns without waiting for the drain timeout, in both modes.
func TestShutdownEndsSubscribedClients(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	for _, noLoop := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoEventLoop=%v", noLoop), func(t *testing.T) {
			p, err := proxy.New(proxy.Config{Upstreams: []string{srv.Addr}, NoEventLoop: noLoop, DrainTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Serve(ctx, ln) }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprint(c, "SUBSCRIBE pipe:shutdown\r\n")
			br := bufio.NewReader(c)
			var got strings.Builder
			for !strings.Contains(got.String(), ":1\r\n") {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("SUBSCRIBE: %q, %v", got.String(), err)
				}
				got.WriteString(line)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("drain: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Serve did not return with a subscribed client connected")
			}
			if line, err := br.ReadString('\n'); err == nil {
				t.Fatalf("the subscribed client got %q after shutdown, want its connection closed", line)
			}
		})
	}
}
