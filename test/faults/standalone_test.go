package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// modes are the proxy's two ways of serving clients.
var modes = []struct {
	name   string
	noLoop bool
}{{"loop", false}, {"sessions", true}}

// load runs clients that INCR a key each, in a loop, until stop closes;
// every command must come back (answered or failed) within hang, else it
// counts as a hang. acked counts the INCRs Redis answered.
type load struct {
	acked, failed, hangs atomic.Int64
	errs                 sync.Map // error text -> true
	wg                   sync.WaitGroup
	stop                 chan struct{}
}

func startLoad(addr string, clients int, hang time.Duration) *load {
	l := &load{stop: make(chan struct{})}
	for i := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, ReadTimeout: -1, WriteTimeout: -1})
			defer c.Close()
			key := fmt.Sprintf("load:%d", i)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), hang)
				err := c.Incr(ctx, key).Err()
				cancel()
				switch {
				case err == nil:
					l.acked.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					l.hangs.Add(1)
				default:
					l.failed.Add(1)
					l.errs.Store(err.Error(), true)
				}
			}
		}()
	}
	return l
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

func (l *load) errors() []string {
	var out []string
	l.errs.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	return out
}

// TestRedisKilledAndRestarted: while Redis is down, clients get errors at
// once (none hangs) and the proxy dials it at a bounded rate, not once per
// command; once Redis listens again on the same port, clients are served
// within 1 s.
func TestRedisKilledAndRestarted(t *testing.T) {
	skipShort(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv := startServer(t)
			addr, reg := startProxy(t, proxy.Config{Upstreams: []string{srv.addr()}, NoEventLoop: m.noLoop})
			l := startLoad(addr, 8, 5*time.Second)
			eventually.True(t, 10*time.Second, "load served", func() bool { return l.acked.Load() > 100 })
			srv.kill()
			eventually.True(t, 10*time.Second, "clients see errors", func() bool { return l.failed.Load() > 100 })
			// While Redis is down: count dials over a second of load.
			before := counter(t, reg, "heatsink_proxy_upstream_errors_total", map[string]string{"kind": "dial"})
			failedBefore := l.failed.Load()
			time.Sleep(time.Second) // the fault's duration, not a wait for a condition
			dials := counter(t, reg, "heatsink_proxy_upstream_errors_total", map[string]string{"kind": "dial"}) - before
			errs := l.failed.Load() - failedBefore
			t.Logf("Redis down for 1 s: %d commands failed, %v dials", errs, dials)
			if dials > 20 {
				t.Errorf("%v dials in 1 s while Redis was down (%d commands): no backoff", dials, errs)
			}
			srv.start()
			back := time.Now()
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer c.Close()
			for c.Set(context.Background(), "back", "1", 0).Err() != nil {
				time.Sleep(5 * time.Millisecond) // measuring how soon it is served
			}
			served := time.Since(back)
			t.Logf("served again %v after Redis listened", served)
			if served > time.Second {
				t.Errorf("served again only %v after Redis listened (want within 1 s)", served)
			}
			l.end()
			if n := l.hangs.Load(); n > 0 {
				t.Errorf("%d commands hung (no reply or error within 5 s)", n)
			}
			for _, e := range l.errors() {
				if !strings.Contains(e, "heatsink proxy") {
					t.Errorf("unexpected error: %s", e)
				}
			}
		})
	}
}

// TestRedisStopped: Redis stopped (SIGSTOP) for 10 s, then continued:
// with no proxy-made timeout, every command waits as it would on a direct
// connection, and is answered; nothing fails, nothing is lost.
func TestRedisStopped(t *testing.T) {
	skipShort(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv := startServer(t)
			addr, _ := startProxy(t, proxy.Config{Upstreams: []string{srv.addr()}, NoEventLoop: m.noLoop})
			l := startLoad(addr, 8, time.Minute)
			eventually.True(t, 10*time.Second, "load served", func() bool { return l.acked.Load() > 100 })
			srv.signal(syscall.SIGSTOP)
			time.Sleep(10 * time.Second) // the fault's duration
			srv.signal(syscall.SIGCONT)
			acked := l.acked.Load()
			eventually.True(t, 10*time.Second, "load served again", func() bool { return l.acked.Load() > acked+100 })
			l.end()
			if n, f := l.hangs.Load(), l.failed.Load(); n > 0 || f > 0 {
				t.Fatalf("%d commands hung, %d failed (%v): a stopped Redis must only delay them", n, f, l.errors())
			}
			direct := redis.NewClient(&redis.Options{Addr: srv.addr()})
			defer direct.Close()
			var sum int64
			for i := range 8 {
				n, _ := direct.Get(context.Background(), fmt.Sprintf("load:%d", i)).Int64()
				sum += n
			}
			if sum != l.acked.Load() {
				t.Fatalf("Redis counted %d INCRs, clients got %d replies", sum, l.acked.Load())
			}
		})
	}
}

// TestUpstreamConnectionKilled: CLIENT KILL of the proxy's upstream
// connections fails only the commands in flight on them; the client
// connections stay open and the next commands are served.
func TestUpstreamConnectionKilled(t *testing.T) {
	skipShort(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			srv := startServer(t)
			addr, _ := startProxy(t, proxy.Config{Upstreams: []string{srv.addr()}, NoEventLoop: m.noLoop})
			const clients = 8
			l := startLoad(addr, clients, 5*time.Second)
			eventually.True(t, 10*time.Second, "load served", func() bool { return l.acked.Load() > 100 })
			direct := redis.NewClient(&redis.Options{Addr: srv.addr()})
			defer direct.Close()
			for range 3 {
				if err := direct.ClientKillByFilter(context.Background(), "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
					t.Fatal(err)
				}
				acked := l.acked.Load()
				eventually.True(t, 10*time.Second, "served after the kill", func() bool { return l.acked.Load() > acked+100 })
			}
			l.end()
			// Each kill fails at most what was in flight: one command per
			// client (they send one at a time).
			if f := l.failed.Load(); f > 3*clients {
				t.Errorf("%d commands failed for 3 kills of connections carrying %d clients' commands", f, clients)
			}
			if n := l.hangs.Load(); n > 0 {
				t.Errorf("%d commands hung", n)
			}
			var sum int64
			for i := range clients {
				n, _ := direct.Get(context.Background(), fmt.Sprintf("load:%d", i)).Int64()
				sum += n
			}
			// A failed INCR may have run (its reply was lost with the
			// connection); an acknowledged one always did.
			if sum < l.acked.Load() || sum > l.acked.Load()+l.failed.Load() {
				t.Fatalf("Redis counted %d INCRs; %d acknowledged, %d failed", sum, l.acked.Load(), l.failed.Load())
			}
		})
	}
}
