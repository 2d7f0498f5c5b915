package nodeagent

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
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
	addr := fullListener(t)
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
		most = max(most, pendingTo(t, addr))
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
func fullListener(t *testing.T) string {
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
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue (with backlog 0, Linux queues one): this one
	// completes, later ones stay in SYN-SENT.
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return addr
}

// pendingTo counts the sockets in SYN-SENT to addr (this process's: the
// test's own fillers are established).
func pendingTo(t *testing.T, addr string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	var p int
	fmt.Sscan(port, &p)
	want := fmt.Sprintf("0100007F:%04X", p)
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Skip("no /proc/net/tcp:", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// sl local rem st: st 02 is SYN_SENT.
		if len(fs) > 3 && fs[2] == want && fs[3] == "02" {
			n++
		}
	}
	return n
}
