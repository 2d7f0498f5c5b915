package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A manager that accepts no connection (its accept queue full: starved, or
// out of descriptors) leaves each of the agent's connection attempts
// pending in the kernel (SYN-SENT, retried for about two minutes). The
// agent gives up on a stream attempt after 3 s and tries again; were each
// try a new socket, the agent would hold one more descriptor every few
// seconds, and a fleet's agents would pile up thousands of them on one host
// (the fleet simulator's 5,000 nodes: 4,789 pending connections in one
// process of 2,500 agents, which then ran out of descriptors). The agent
// holds at most MaxManagerConns connections to the manager, pending ones
// included.
func TestAgentBoundsItsConnectionsToAStalledManager(t *testing.T) {
	addr, filler := fullListener(t)
	d, err := New(Options{NodeName: "node-a", ListenAddr: "127.0.0.1:0", Manager: addr, Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	// Three connect timeouts and their backoffs: enough tries to exceed the
	// bound were each a new socket.
	deadline := time.Now().Add(16 * time.Second)
	most := 0
	tick := time.NewTicker(200 * time.Millisecond) // sampling the kernel's table
	defer tick.Stop()
	for ; time.Now().Before(deadline); <-tick.C {
		most = max(most, connsTo(t, addr, filler))
		if most > MaxManagerConns {
			t.Fatalf("the agent holds %d connection attempts to a manager that accepts none; want at most %d", most, MaxManagerConns)
		}
	}
	if most == 0 {
		t.Fatal("no connection attempt seen: the test saw nothing of the agent")
	}
}

// fullListener listens on a loopback port with the smallest accept queue,
// fills it, and never accepts: further connection attempts stay pending.
// It returns the port's address and the filling connection's own.
func fullListener(t *testing.T) (addr, filler string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr = fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue (with backlog 0, Linux queues one): this one
	// completes, later ones stay in SYN-SENT.
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return addr, c.LocalAddr().String()
}

// connsTo counts the sockets connected or connecting to addr but filler
// (the clients' ends: the listener's own have addr as their local
// address) that hold a descriptor: a socket the agent closed lingers in
// the table (FIN-WAIT, its handshake having completed into the full queue)
// with inode 0, owned by no descriptor. It reads the table of
// the network namespace that holds filler: /proc/self/net is the main
// thread's, and another test of this package (capture, netns) may have
// moved that one elsewhere, so each thread's view is tried.
func connsTo(t *testing.T, addr, filler string) int {
	t.Helper()
	tasks, _ := filepath.Glob("/proc/self/task/*/net/tcp")
	for _, path := range append([]string{"/proc/self/net/tcp"}, tasks...) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, sawFiller := 0, false
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[2] != procAddr(addr) {
				continue
			}
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode.
			switch {
			case fs[1] == procAddr(filler):
				sawFiller = true
			case len(fs) > 9 && fs[9] != "0":
				n++
			}
		}
		if sawFiller {
			return n
		}
	}
	t.Skip("no /proc/*/net/tcp holds the test's own connection")
	return 0
}

// procAddr writes a loopback "127.0.0.1:port" as /proc/net/tcp does.
func procAddr(a string) string {
	_, port, _ := net.SplitHostPort(a)
	var p int
	fmt.Sscan(port, &p)
	return fmt.Sprintf("0100007F:%04X", p)
}
