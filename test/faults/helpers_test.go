// Package faults tests the sidecar proxy against real redis-server processes
// that fail: killed and restarted, stopped, their connections killed, a
// cluster failing over or resharding under load, the proxy itself told to
// stop mid-pipeline or run out of file descriptors.
package faults

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/proxy"
	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
	"github.com/heatsink-dev/heatsink/internal/testing/heatsinkbin"
	"github.com/heatsink-dev/heatsink/internal/testing/proxytest"
	"github.com/heatsink-dev/heatsink/internal/testing/redisproc"
)

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server; skipped with -short")
	}
	if err := redisproc.Available(); err != nil {
		t.Fatal(err)
	}
}

// server is a redis-server this package starts and restarts on one port.
type server struct {
	t    *testing.T
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// freePort finds a loopback port that is free now (and, for a cluster
// node, whose bus port, +10000, is free too).
func freePort(t *testing.T, cluster bool) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !cluster {
			return p
		}
		if p+10000 > 65535 {
			continue
		}
		if b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000))); err == nil {
			b.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// startServer starts a redis-server on a free port, stopped at cleanup.
func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	s := &server{t: t, port: freePort(t, false), dir: t.TempDir(), args: extra}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir, "--save", "",
		"--appendonly", "no", "--daemonize", "no", "--protected-mode", "no", "--logfile", filepath.Join(s.dir, "redis.log")}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	s.done = done
	cmd := s.cmd
	go func() { _ = cmd.Wait(); close(done) }()
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	eventually.Succeeds(s.t, 10*time.Second, func() error {
		select {
		case <-done:
			return eventually.Permanent(fmt.Errorf("redis-server on %d exited", s.port))
		default:
		}
		return c.Ping(context.Background()).Err()
	})
}

// kill stops the server at once (SIGKILL) and waits for it.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
}

// startProxy serves a proxy in process until the test ends, with its
// metrics in a registry of its own.
func startProxy(t *testing.T, cfg proxy.Config) (string, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	addr, _ := proxytest.Start(t, cfg)
	return addr, reg
}

// counter sums a counter family's series whose labels contain want.
func counter(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// proxyProcess is `heatsink sidecar` running as its own process.
type proxyProcess struct {
	addr   string
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	output strings.Builder
}

// startProxyProcess runs `heatsink sidecar` (through prefix, e.g. prlimit)
// listening on a free port, in front of upstream.
func startProxyProcess(t *testing.T, upstream string, prefix []string, flags ...string) *proxyProcess {
	t.Helper()
	// The ports are free when chosen, not reserved: a test package running
	// in parallel may bind one first. The sidecar then exits at once with
	// "address already in use", and a new pair of ports is tried.
	for attempt := 1; ; attempt++ {
		pp, err := tryProxyProcess(t, upstream, prefix, flags...)
		if err == nil {
			return pp
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v", attempt, err)
	}
}

// tryProxyProcess starts `heatsink sidecar` on two ports free when chosen
// and waits until it answers PING; it returns an error if it exits first.
func tryProxyProcess(t *testing.T, upstream string, prefix []string, flags ...string) (*proxyProcess, error) {
	t.Helper()
	bin := heatsinkbin.Path(t)
	port := freePort(t, false)
	pp := &proxyProcess{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	args := append(append([]string{}, prefix...), bin, "sidecar", "--listen", pp.addr, "--upstream", upstream,
		"--http-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, false))), "--routing-file", "")
	args = append(args, flags...)
	pp.cmd = exec.Command(args[0], args[1:]...)
	stderr, err := pp.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			pp.mu.Lock()
			pp.output.WriteString(sc.Text() + "\n")
			pp.mu.Unlock()
		}
	}()
	go func() { _ = pp.cmd.Wait(); close(pp.done) }()
	t.Cleanup(func() {
		select {
		case <-pp.done:
		default:
			_ = pp.cmd.Process.Kill()
			<-pp.done
		}
	})
	c := redis.NewClient(&redis.Options{Addr: pp.addr, MaxRetries: -1})
	defer c.Close()
	err = eventually.Poll(context.Background(), 30*time.Second, func() error {
		select {
		case <-pp.done:
			return eventually.Permanent(fmt.Errorf("heatsink sidecar exited: %s", pp.log()))
		default:
		}
		return c.Ping(context.Background()).Err()
	})
	if err != nil {
		return nil, err
	}
	return pp, nil
}

func (pp *proxyProcess) log() string {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.output.String()
}

func (pp *proxyProcess) exited() bool {
	select {
	case <-pp.done:
		return true
	default:
		return false
	}
}
