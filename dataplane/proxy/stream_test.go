package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/redistest"
)

// TestLargeReplyIsStreamed reads a 128 MiB value through the proxy (event
// loop and sessions) with a client that reads slowly: the reply arrives
// whole and the process's heap never holds more than a small part of it
// (before, the proxy held the whole reply, and a few such clients took a
// sidecar past its memory limit).
func TestLargeReplyIsStreamed(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	const size = 128 << 20
	// Seed the value without holding it in this process: APPEND pieces.
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	piece := strings.Repeat("v", 1<<20)
	for range size >> 20 {
		if err := direct.Append(context.Background(), "big", piece).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, noLoop := range []bool{false, true} {
		t.Run(fmt.Sprintf("sessions-only=%v", noLoop), func(t *testing.T) {
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, NoEventLoop: noLoop})
			runtime.GC()
			var base runtime.MemStats
			runtime.ReadMemStats(&base)
			var peak atomic.Uint64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					if m.HeapInuse > peak.Load() {
						peak.Store(m.HeapInuse)
					}
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprint(c, "*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n*1\r\n$4\r\nPING\r\n")
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			r := bufio.NewReaderSize(c, 64<<10)
			line, err := r.ReadString('\n')
			if err != nil || line != "$"+strconv.Itoa(size)+"\r\n" {
				t.Fatalf("header %q, %v", line, err)
			}
			buf := make([]byte, 64<<10)
			left := size + 2
			for left > 0 {
				n, err := r.Read(buf[:min(len(buf), left)])
				if err != nil {
					t.Fatal(err)
				}
				left -= n
				time.Sleep(50 * time.Microsecond) // a slow reader
			}
			if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
				t.Fatalf("after the value: %q, %v", line, err)
			}
			close(stop)
			<-sampled
			grew := int64(peak.Load()) - int64(base.HeapInuse)
			t.Logf("heap grew by at most %.1f MiB while a %d MiB reply went through", float64(grew)/(1<<20), size>>20)
			if grew > 32<<20 {
				t.Fatalf("heap grew by %.1f MiB for a %d MiB reply: the proxy held it", float64(grew)/(1<<20), size>>20)
			}
		})
	}
	_ = io.EOF
}

// TestObserverSeesStreamedReplySize: a reply large enough to be streamed
// is reported to the Observer with its whole size (the big keys of the
// report rank by it), from the event loop, a shared session and a
// dedicated one (CLIENT SETNAME makes a connection's session its own).
func TestObserverSeesStreamedReplySize(t *testing.T) {
	skipShort(t)
	srv := redistest.Standalone(t)
	const size = 20 << 20
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	if err := direct.Set(context.Background(), "big", strings.Repeat("v", size), 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		noLoop bool
		client string
	}{{"event loop", false, ""}, {"shared session", true, ""}, {"dedicated session", true, "app"}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{m: map[string][3]uint32{}}
			addr, _ := start(t, proxy.Config{Upstreams: []string{srv.Addr}, NoEventLoop: tc.noLoop, Observer: rec, Policy: "ns/p"})
			c := redis.NewClient(&redis.Options{Addr: addr, ClientName: tc.client, ReadTimeout: time.Minute})
			defer c.Close()
			if v, err := c.Get(context.Background(), "big").Result(); err != nil || len(v) != size {
				t.Fatalf("GET big: %d bytes, %v", len(v), err)
			}
			rec.mu.Lock()
			got := rec.m["ns/p|big"]
			rec.mu.Unlock()
			if want := uint32(size + len("$20971520\r\n\r\n")); got[0] != 1 || got[2] != want {
				t.Fatalf("observed reads, bytes = %d, %d; want 1 read of the whole reply, %d bytes", got[0], got[2], want)
			}
		})
	}
}
