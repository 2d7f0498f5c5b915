package skew

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// monitor counts the GETs of some keys that a redis-server serves while
// it runs, from the server's MONITOR stream: a count per key, where INFO
// commandstats sums every key's GETs (the split counter's sums among
// them) and OBJECT FREQ counts writes too (the manager's fills of copies)
// and stops at 255. MONITOR's +OK comes once every later command is
// streamed, so nothing after newMonitor returns is missed.
type monitor struct {
	conn net.Conn
	n    atomic.Int64
	last atomic.Value // the last line counted, for a failure's message
	done chan struct{}
	once sync.Once
}

// startMonitor is newMonitor for the test's goroutine, stopped at its
// cleanup.
func startMonitor(t *testing.T, addr string, keys ...string) *monitor {
	t.Helper()
	m, err := newMonitor(addr, keys...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.stop)
	return m
}

// newMonitor counts the GETs of keys on the server at addr until stop.
func newMonitor(addr string, keys ...string) (*monitor, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	rd := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	if l, err := rd.ReadString('\n'); err != nil || l != "+OK\r\n" {
		conn.Close()
		return nil, fmt.Errorf("MONITOR on %s: %q (%v)", addr, l, err)
	}
	_ = conn.SetDeadline(time.Time{})
	// A line is `+<time> [<db> <client>] "get" "<key>"`, the command's
	// name as the client sent it.
	var want []string
	for _, k := range keys {
		want = append(want, fmt.Sprintf(` "get" %q`, k))
	}
	m := &monitor{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			l = strings.ToLower(strings.TrimRight(l, "\r\n"))
			for _, w := range want {
				if strings.HasSuffix(l, w) {
					m.last.Store(l)
					m.n.Add(1)
				}
			}
		}
	}()
	return m, nil
}

// count is how many GETs of the keys the server has served since the
// monitor started.
func (m *monitor) count() int64 { return m.n.Load() }

// lastLine is the last line counted (its time, database, client's
// address and command).
func (m *monitor) lastLine() string { l, _ := m.last.Load().(string); return l }

// stop closes the stream (idempotent).
func (m *monitor) stop() {
	m.once.Do(func() { _ = m.conn.Close() })
	<-m.done
}
