package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// TestSIGTERMMidPipeline stops `heatsink sidecar` with SIGTERM while 50
// clients stream pipelines of INCRs: it exits 0 within its drain timeout,
// every reply a client got is a whole, well-formed reply, and Redis ran
// exactly the INCRs whose replies came back (the commands left unanswered
// never ran).
func TestSIGTERMMidPipeline(t *testing.T) {
	skipShort(t)
	for _, m := range []struct {
		name  string
		flags []string
	}{{"loop", nil}, {"sessions", []string{"--event-loop=false"}}} {
		t.Run(m.name, func(t *testing.T) {
			srv := startServer(t)
			pp := startProxyProcess(t, srv.addr(), nil, m.flags...)
			const clients, depth = 50, 100
			var acked [clients]atomic.Int64
			var garbled atomic.Int64
			var started sync.WaitGroup
			var wg sync.WaitGroup
			for i := range clients {
				started.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.Dial("tcp", pp.addr)
					if err != nil {
						started.Done()
						return
					}
					defer c.Close()
					key := "term:" + strconv.Itoa(i)
					var req []byte
					for range depth {
						req = fmt.Appendf(req, "*2\r\n$4\r\nINCR\r\n$%d\r\n%s\r\n", len(key), key)
					}
					r := bufio.NewReader(c)
					first := true
					for {
						c.SetDeadline(time.Now().Add(30 * time.Second))
						if _, err := c.Write(req); err != nil {
							return
						}
						for range depth {
							line, err := r.ReadString('\n')
							if err != nil {
								if len(line) > 0 {
									garbled.Add(1) // a reply cut in the middle
								}
								return
							}
							if !strings.HasPrefix(line, ":") || !strings.HasSuffix(line, "\r\n") {
								garbled.Add(1)
								return
							}
							acked[i].Add(1)
						}
						if first {
							first = false
							started.Done()
						}
					}
				}()
			}
			started.Wait()
			stop := time.Now()
			if err := pp.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-pp.done:
			case <-time.After(15 * time.Second):
				t.Fatalf("the proxy did not exit within 15 s of SIGTERM (drain timeout 10 s)")
			}
			took := time.Since(stop)
			wg.Wait()
			if code := pp.cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("exit code %d after SIGTERM:\n%s", code, pp.log())
			}
			t.Logf("exited %v after SIGTERM", took)
			if n := garbled.Load(); n > 0 {
				t.Fatalf("%d garbled replies", n)
			}
			direct := redis.NewClient(&redis.Options{Addr: srv.addr()})
			defer direct.Close()
			for i := range clients {
				n, _ := direct.Get(context.Background(), "term:"+strconv.Itoa(i)).Int64()
				if n != acked[i].Load() {
					t.Errorf("client %d: Redis ran %d INCRs, the client got %d replies", i, n, acked[i].Load())
				}
			}
		})
	}
}

// TestOutOfFileDescriptors runs `heatsink sidecar` with 64 file descriptors
// and connects more clients than it can hold: it must not exit (before, an
// EMFILE from accept ended it and every connection with it); the clients
// it holds keep being served, and once some leave, the waiting ones are
// accepted.
func TestOutOfFileDescriptors(t *testing.T) {
	skipShort(t)
	srv := startServer(t)
	pp := startProxyProcess(t, srv.addr(), []string{"prlimit", "--nofile=64:64", "--"})
	ctx := context.Background()
	held := redis.NewClient(&redis.Options{Addr: pp.addr, MaxRetries: -1, PoolSize: 1})
	defer held.Close()
	if err := held.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Far more connections than descriptors: the kernel queues them, the
	// proxy accepts what it can.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 120 {
		c, err := net.DialTimeout("tcp", pp.addr, 5*time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
		c.Write([]byte("PING\r\n"))
	}
	eventually.True(t, 10*time.Second, "the proxy ran out of descriptors", func() bool {
		return strings.Contains(pp.log(), "too many open files")
	})
	for range 20 {
		if v, err := held.Get(ctx, "k").Result(); err != nil || v != "v" {
			t.Fatalf("a held connection while out of descriptors: %q, %v", v, err)
		}
	}
	if pp.exited() {
		t.Fatalf("the proxy exited when out of descriptors:\n%s", pp.log())
	}
	// Free descriptors: once the proxy has closed what the clients closed,
	// new connections are served again.
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	ping := func() error {
		c, err := net.DialTimeout("tcp", pp.addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		buf := make([]byte, 7)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "+PONG\r\n" {
			return fmt.Errorf("PING on a new connection: %q, %v", buf, err)
		}
		return nil
	}
	eventually.Succeeds(t, 20*time.Second, ping)
	for range 20 {
		if err := ping(); err != nil {
			t.Fatal(err)
		}
	}
	if pp.exited() {
		t.Fatalf("the proxy exited:\n%s", pp.log())
	}
}
