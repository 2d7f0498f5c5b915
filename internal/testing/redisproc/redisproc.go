// Package redisproc starts and stops real redis-server processes on free
// loopback ports: a standalone server or an N-master Redis Cluster. Tests,
// benchmarks and the demo use it; it never mocks Redis.
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// ErrMissing is returned when redis-server or redis-cli is not installed.
var ErrMissing = errors.New("redis-server/redis-cli not found: run `make redis` or `apt-get install -y redis-server redis-tools`")

// Server is one running redis-server.
type Server struct {
	Addr string
	Port int
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
	once sync.Once
}

// Options tunes a started server.
type Options struct {
	// Dir holds the server's working files; a temporary directory if empty.
	Dir string
	// ExtraArgs are appended to the command line (e.g. "--requirepass", "x").
	ExtraArgs []string
	// PortArgs, if set, gives more arguments from the port chosen for the
	// server (a cluster node's TLS port and bus port, say).
	PortArgs func(port int) []string
}

// Available reports whether redis-server and redis-cli are on PATH.
func Available() error {
	for _, b := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(b); err != nil {
			return ErrMissing
		}
	}
	return nil
}

// Start starts a standalone redis-server and waits until it answers PING.
func Start(ctx context.Context, opts Options) (*Server, error) {
	return start(ctx, opts, false)
}

func start(ctx context.Context, opts Options, cluster bool) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	dir := opts.Dir
	owned := false
	if dir == "" {
		d, err := os.MkdirTemp("", "heatsink-redis-")
		if err != nil {
			return nil, err
		}
		dir, owned = d, true
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(cluster)
		if err != nil {
			return nil, err
		}
		extra := opts.ExtraArgs
		if opts.PortArgs != nil {
			extra = append(append([]string(nil), extra...), opts.PortArgs(port)...)
		}
		s, err := launch(ctx, dir, port, cluster, extra)
		if err == nil {
			if owned {
				s.dir = dir
			}
			return s, nil
		}
		lastErr = err
	}
	if owned {
		_ = os.RemoveAll(dir)
	}
	return nil, lastErr
}

func launch(ctx context.Context, dir string, port int, cluster bool, extra []string) (*Server, error) {
	pdir := filepath.Join(dir, strconv.Itoa(port))
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return nil, err
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", pdir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(pdir, "redis.log"),
	}
	if cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(pdir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
		)
	}
	args = append(args, extra...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	err := eventually.Poll(ctx, 10*time.Second, func() error {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(pdir, "redis.log"))
			return eventually.Permanent(fmt.Errorf("redis-server on port %d exited: %s", port, tail(string(log))))
		default:
			return ping(s.Addr)
		}
	})
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("redis-server on port %d: %w", port, err)
	}
	return s, nil
}

// Pid is the server's process ID.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Signal sends sig to the server's process (SIGSTOP freezes it, SIGCONT
// lets it go on: a replica that stops acknowledging, a stalled master).
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Stop kills the server and waits for it to exit. Safe to call twice.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
		}
		<-s.done
		if s.dir != "" {
			_ = os.RemoveAll(s.dir)
		}
	})
}

// Cluster is a running Redis Cluster: masters only (StartCluster), or
// masters with replicas (StartClusterReplicas).
type Cluster struct {
	Servers []*Server
	dir     string
}

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string { return addrs(c.Servers) }

// addrs are the servers' addresses, in order.
func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr
	}
	return out
}

// StartCluster starts masters redis-servers in cluster mode, joins them with
// `redis-cli --cluster create` (slots split evenly, no replicas) and waits
// until every node reports cluster_state:ok.
func StartCluster(ctx context.Context, masters int) (*Cluster, error) {
	return startCluster(ctx, masters, 0)
}

// ClusterOptions describe a cluster StartClusterWith starts.
type ClusterOptions struct {
	Masters, Replicas int
	// NodeArgs, if set, gives each node more arguments from its port
	// (Options.PortArgs). The cluster is created through the nodes'
	// plaintext ports, which they keep.
	NodeArgs func(port int) []string
}

// StartClusterWith starts a cluster as StartCluster and
// StartClusterReplicas do, with the nodes' arguments o gives.
func StartClusterWith(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	return startClusterWith(ctx, o)
}

func startCluster(ctx context.Context, masters, replicas int) (*Cluster, error) {
	return startClusterWith(ctx, ClusterOptions{Masters: masters, Replicas: replicas})
}

func startClusterWith(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	masters, replicas := o.Masters, o.Replicas
	if masters < 3 {
		return nil, errors.New("redis cluster needs at least 3 masters")
	}
	if err := Available(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "heatsink-redis-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	var extra []string
	if replicas > 0 {
		// CLUSTER SLOTS leaves out a replica whose offset its node knows
		// (by gossip) as 0; a master's pings move it, every second here
		// rather than every 10 s, so an idle new cluster lists its
		// replicas at once.
		extra = []string{"--repl-ping-replica-period", "1"}
	}
	for i := 0; i < masters*(1+replicas); i++ {
		s, err := start(ctx, Options{Dir: dir, ExtraArgs: extra, PortArgs: o.NodeArgs}, true)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, tail(string(out)))
	}
	// One deadline for the whole cluster, as a client would wait for it.
	err = eventually.Poll(ctx, 30*time.Second, func() error {
		for _, s := range c.Servers {
			info, err := command(s.Addr, "CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("cluster node %s: %w", s.Addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("cluster node %s not ok: %s", s.Addr, info)
			}
		}
		if err := replicasLinked(c.Servers, masters*replicas); err != nil {
			return err
		}
		return clusterKnowsReplicas(c.Servers, masters*replicas)
	})
	if err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Stop stops every node and removes the cluster's files.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		s.Stop()
	}
	_ = os.RemoveAll(c.dir)
}

// freePort finds a loopback port that is free now; for cluster nodes the
// cluster bus port (port+10000) must be free too.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !cluster {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		if bl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
			_ = bl.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port pair for a cluster node")
}

func ping(addr string) error {
	out, err := command(addr, "PING")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "PONG") && !strings.Contains(out, "NOAUTH") {
		return fmt.Errorf("unexpected PING reply %q", out)
	}
	return nil
}

// command sends one inline command and returns the first reply as text.
func command(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(line, "$") {
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return strings.TrimSpace(line), nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
