// Package netns builds, for tests and benchmarks, a small network of
// Linux network namespaces joined by veth pairs: a client namespace and a
// server namespace routed through an observer namespace (a "node" whose
// interfaces a capture can watch). Addresses are in 198.18.0.0/15 (the
// benchmarking range), names are unique per run, and everything is
// removed by Close.
package netns

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heatsink-dev/heatsink/internal/testing/eventually"
)

// Addresses of the topology.
const (
	ClientIP = "198.18.1.2" // in the client namespace
	// ClientIP2 and ClientIP3 are more addresses of the client namespace
	// (other pods, for tests that tell pods apart).
	ClientIP2   = "198.18.1.3"
	ClientIP3   = "198.18.1.4"
	ObserverCIP = "198.18.1.1" // the observer's end toward the client
	ServerIP    = "198.18.2.2" // in the server namespace
	// ClientIP6 and ServerIP6 are the IPv6 addresses of the client and
	// server namespaces (2001:2::/48, the IPv6 benchmarking range).
	ClientIP6    = "2001:2:0:1::2"
	ServerIP6    = "2001:2:0:2::2"
	ObserverSIP  = "198.18.2.1" // the observer's end toward the server
	prefixLength = "/24"
)

// Net is the three namespaces.
type Net struct {
	// Client, Server and Observer are the namespaces' names (in
	// /run/netns); ClientIf is the observer's interface toward the client.
	Client, Server, Observer string
	ClientIf, ServerIf       string
}

// Available says why the topology cannot be built here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("needs the ip binary (iproute2)")
	}
	return nil
}

// New builds the topology. On error what was built is removed.
func New() (*Net, error) {
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	n := &Net{
		Client: "hs-cli-" + id, Server: "hs-srv-" + id, Observer: "hs-obs-" + id,
		ClientIf: "hsc" + id, ServerIf: "hss" + id,
	}
	steps := [][]string{
		{"netns", "add", n.Client}, {"netns", "add", n.Server}, {"netns", "add", n.Observer},
		{"link", "add", n.ClientIf, "netns", n.Observer, "type", "veth", "peer", "name", "eth0", "netns", n.Client},
		{"link", "add", n.ServerIf, "netns", n.Observer, "type", "veth", "peer", "name", "eth0", "netns", n.Server},
		{"-n", n.Observer, "addr", "add", ObserverCIP + prefixLength, "dev", n.ClientIf},
		{"-n", n.Observer, "addr", "add", ObserverSIP + prefixLength, "dev", n.ServerIf},
		{"-n", n.Client, "addr", "add", ClientIP + prefixLength, "dev", "eth0"},
		{"-n", n.Client, "addr", "add", ClientIP2 + prefixLength, "dev", "eth0"},
		{"-n", n.Client, "addr", "add", ClientIP3 + prefixLength, "dev", "eth0"},
		{"-n", n.Server, "addr", "add", ServerIP + prefixLength, "dev", "eth0"},
		{"-n", n.Observer, "link", "set", n.ClientIf, "up"},
		{"-n", n.Observer, "link", "set", n.ServerIf, "up"},
		{"-n", n.Observer, "link", "set", "lo", "up"},
		{"-n", n.Client, "link", "set", "eth0", "up"},
		{"-n", n.Client, "link", "set", "lo", "up"},
		{"-n", n.Server, "link", "set", "eth0", "up"},
		{"-n", n.Server, "link", "set", "lo", "up"},
		{"-n", n.Client, "route", "add", "default", "via", ObserverCIP},
		{"-n", n.Server, "route", "add", "default", "via", ObserverSIP},
		// IPv6, without duplicate address detection (usable at once).
		{"-n", n.Observer, "addr", "add", "2001:2:0:1::1/64", "dev", n.ClientIf, "nodad"},
		{"-n", n.Observer, "addr", "add", "2001:2:0:2::1/64", "dev", n.ServerIf, "nodad"},
		{"-n", n.Client, "addr", "add", ClientIP6 + "/64", "dev", "eth0", "nodad"},
		{"-n", n.Server, "addr", "add", ServerIP6 + "/64", "dev", "eth0", "nodad"},
		{"-n", n.Client, "-6", "route", "add", "default", "via", "2001:2:0:1::1"},
		{"-n", n.Server, "-6", "route", "add", "default", "via", "2001:2:0:2::1"},
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			n.Close()
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	// Forwarding in the observer only (a per-namespace setting).
	for _, kv := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"} {
		if out, err := exec.Command("ip", "netns", "exec", n.Observer, "sysctl", "-qw", kv).CombinedOutput(); err != nil {
			n.Close()
			return nil, fmt.Errorf("forwarding in %s: %v: %s", n.Observer, err, out)
		}
	}
	return n, nil
}

// Close removes the namespaces (their veths go with them).
func (n *Net) Close() {
	for _, ns := range []string{n.Client, n.Server, n.Observer} {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
}

// Command is cmd run in namespace ns (ip netns exec).
func Command(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Do runs f on an OS thread moved into namespace ns: sockets f creates
// belong to ns for their lifetime. The thread is discarded afterwards
// (never handed back to other goroutines).
func Do(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Dialer dials from namespace ns, from local address from if not empty
// (for a client's Dialer option).
func Dialer(ns, from string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := &net.Dialer{}
		if from != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		var c net.Conn
		err := Do(ns, func() (err error) {
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// StartRedis runs redis-server in namespace ns on addr:port with extra
// arguments, and returns once it answers there (a test's first dial was
// refused now and then on a loaded machine); stop it with the returned
// function (by its PID).
func StartRedis(ns, addr string, port int, extra ...string) (stop func(), err error) {
	args := append([]string{"--bind", addr, "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--daemonize", "no", "--logfile", ""}, extra...)
	cmd := Command(context.Background(), ns, "redis-server", args...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		_ = cmd.Process.Kill() // "ip netns exec" execs redis-server: the PID is its
		_ = cmd.Wait()
	}
	target := net.JoinHostPort(addr, fmt.Sprint(port))
	if err := eventually.Poll(context.Background(), 30*time.Second, func() error { return answers(ns, target) }); err != nil {
		stop()
		return nil, fmt.Errorf("redis-server in %s on %s: %w", ns, target, err)
	}
	return stop, nil
}

// answers reports whether a server in ns answers PING at target with any
// reply line (an error reply, NOAUTH, is an answer too).
func answers(ns, target string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := Dialer(ns, "")(ctx, "tcp", target)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line == "" || (line[0] != '+' && line[0] != '-') {
		return fmt.Errorf("answered %q", line)
	}
	return nil
}
