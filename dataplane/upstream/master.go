// Package upstream is what the sidecar's two users of Redis, the proxy's
// raw connections and the engine's go-redis clients (and its raw reads and
// tracking connection), share about reaching Redis, one implementation of
// each:
//
//   - Dialer: TCP and TLS, checked against the CA bundle and client
//     certificate as they are at each handshake, and the credentials as
//     they are at each new connection (ClientTLS, FileCredentials).
//   - Nodes: the table of nodes and, in cluster mode, the slot map, which
//     the proxy routes by and the engine's ClusterClient reads.
//   - Master: the master of a Sentinel target, one address, one fence and
//     one registry of live connections, so that a failover moves both users
//     at the same instant and neither can write to a demoted master after
//     the other learned of the new one.
//
// The sidecar builds all three before either user (sidecar.Run), so
// neither depends on the other.
package upstream

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// ErrSwitched answers the commands in flight on a connection closed by a
// master switch or a fence, and a dial that raced with a switch.
var ErrSwitched = errors.New("master switched (Sentinel failover); the command may or may not have been applied")

// ErrFenced refuses new connections while a failover promotes a replica:
// the old master may no longer be written to, the new one is not known
// yet.
var ErrFenced = errors.New("master failing over (Sentinel); retry")

// ErrFencedInFlight answers the commands in flight on a connection the
// fence closed: they were sent to the old master, which may have applied
// them, so unlike ErrFenced it does not invite a blind retry (an INCR
// retried would count twice).
var ErrFencedInFlight = errors.New("master failing over (Sentinel); the command may or may not have been applied")

// Master is a master that moves (Redis Sentinel, standalone mode).
//
// A switch must never let a client read from or write to the demoted
// master after the sidecar learned of the new one, so every connection to
// the old address is closed at once, whoever holds it. Fence closes the
// same connections when a failover is about to promote a replica, and
// refuses new ones until Switch: the old master stays reachable, and a
// master, for a second or more after the promotion, and every write it
// acknowledged then would be lost when it resynchronises from the new
// master.
//
// Every connection to the master is registered (Track) with the address
// it was dialed to; Switch changes the address and takes the registered
// connections under one lock, so a dial racing with a switch either
// registers first (and is closed by it) or sees the new address and is
// refused. A user that owns its descriptors outright (the proxy's event
// loop) untracks them, and learns of each switch from Attach's hooks and
// Gen, the count of switches and fences, which its dials carry.
type Master struct {
	mu   sync.Mutex
	addr string
	live map[*Conn]struct{}
	// fenced and gen are written under mu, read without it.
	fenced atomic.Bool
	gen    atomic.Uint64
	// moved runs under mu when the address changes; closed after each
	// switch or fence, once the registered connections are closed.
	moved  func(addr string)
	closed func()
}

// NewMaster is a master at addr.
func NewMaster(addr string) *Master {
	return &Master{addr: addr, live: map[*Conn]struct{}{}}
}

// Attach sets the hooks of the one user that keeps connections of its own
// beside the registry: moved is called with the new address under the
// master's lock (it must not block or call back), closed after every
// switch or fence.
func (m *Master) Attach(moved func(addr string), closed func()) {
	m.mu.Lock()
	m.moved, m.closed = moved, closed
	m.mu.Unlock()
}

// Addr is the master's address now.
func (m *Master) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// Fenced reports whether a failover is promoting a replica.
func (m *Master) Fenced() bool { return m.fenced.Load() }

// Gen counts the switches and fences so far: a connection dialed under
// one generation and completed under another went to a master that moved.
func (m *Master) Gen() uint64 { return m.gen.Load() }

// Track registers c, dialed to addr, unless the master moved away from
// addr or was fenced meanwhile: then c is closed and the error says why.
func (m *Master) Track(addr string, c net.Conn) (*Conn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced.Load() {
		c.Close()
		return nil, ErrFenced
	}
	if addr != m.addr {
		c.Close()
		return nil, ErrSwitched
	}
	tc := &Conn{Conn: c, m: m}
	m.live[tc] = struct{}{}
	return tc, nil
}

// Dial connects to the master as it is now with dial, and registers the
// connection: the go-redis Dialer of the engine's client, which connects
// to the current master whatever address go-redis asks for.
func (m *Master) Dial(ctx context.Context, dial func(ctx context.Context, addr string) (net.Conn, error)) (net.Conn, error) {
	if m.fenced.Load() {
		return nil, ErrFenced
	}
	addr := m.Addr()
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return m.Track(addr, c)
}

// Switch moves the master to addr and lifts a fence: every registered
// connection to the old address is closed. It reports whether the address
// changed and whether a fence was lifted.
func (m *Master) Switch(addr string) (changed, unfenced bool, closedConns int) {
	m.mu.Lock()
	unfenced = m.fenced.Load()
	m.fenced.Store(false)
	if m.addr == addr {
		m.mu.Unlock()
		return false, unfenced, 0
	}
	m.addr = addr
	if m.moved != nil {
		m.moved(addr)
	}
	return true, unfenced, m.closeAllLocked()
}

// Fence stops all traffic to the master until Switch, closing every
// registered connection. It reports false if a fence was up already.
func (m *Master) Fence() (fenced bool, closedConns int) {
	m.mu.Lock()
	if m.fenced.Load() {
		m.mu.Unlock()
		return false, 0
	}
	m.fenced.Store(true)
	return true, m.closeAllLocked()
}

// closeAllLocked closes every registered connection, then runs the closed
// hook; m.mu is held, and released.
func (m *Master) closeAllLocked() int {
	m.gen.Add(1)
	victims := m.live
	m.live = map[*Conn]struct{}{}
	closed := m.closed
	m.mu.Unlock()
	for c := range victims {
		_ = c.Conn.Close()
	}
	if closed != nil {
		closed()
	}
	return len(victims)
}

// Conn is a registered connection; closing it leaves the registry.
type Conn struct {
	net.Conn
	m *Master
}

// Close closes the connection and leaves the registry.
func (c *Conn) Close() error {
	c.Untrack()
	return c.Conn.Close()
}

// Untrack leaves the registry without closing the connection: its new
// owner closes it on a switch itself (the proxy's event loop).
func (c *Conn) Untrack() net.Conn {
	c.m.mu.Lock()
	delete(c.m.live, c)
	c.m.mu.Unlock()
	return c.Conn
}

// SyscallConn lets an owner take the descriptor.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}
