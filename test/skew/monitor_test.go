package skew

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// monitor counts the GETs of one key that a redis-server serves while it
// runs, from the server's MONITOR stream: a count per key, where INFO
// commandstats sums every key's GETs (the split counter's sums among
// them) and OBJECT FREQ stops at 255. MONITOR's +OK comes once every
// later command is streamed, so nothing after startMonitor returns is
// missed.
type monitor struct {
	conn net.Conn
	n    atomic.Int64
	done chan struct{}
}

func startMonitor(t *testing.T, addr, key string) *monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m := &monitor{conn: conn, done: make(chan struct{})}
	t.Cleanup(func() { m.stop() })
	rd := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := rd.ReadString('\n'); err != nil || l != "+OK\r\n" {
		t.Fatalf("MONITOR on %s: %q (%v)", addr, l, err)
	}
	_ = conn.SetDeadline(time.Time{})
	// A line is `+<time> [<db> <client>] "get" "<key>"`, the command's
	// name as the client sent it.
	want := fmt.Sprintf(` "get" %q`, key)
	go func() {
		defer close(m.done)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasSuffix(strings.ToLower(strings.TrimRight(l, "\r\n")), want) {
				m.n.Add(1)
			}
		}
	}()
	return m
}

// count is how many GETs of the key the server has served since the
// monitor started.
func (m *monitor) count() int64 { return m.n.Load() }

// stop closes the stream (idempotent).
func (m *monitor) stop() {
	_ = m.conn.Close()
	<-m.done
}
