package proxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// A master that moves (Redis Sentinel, standalone mode).
//
// With Config.FollowMaster the upstream address (node 0) is the master
// that dataplane/sentinel discovered, and SetMaster moves it. A switch
// must never let a client read from or write to the demoted master after
// the proxy learned of the new one, so every connection to the old
// address is closed at once, whoever holds it: the shared connections
// (sessions and the event loop), the warm and spare ones, and those of
// sessions that touched connection state. Commands in flight on them get
// an error (they may or may not have been applied, as with any lost
// connection); a client whose connection state went with them is
// disconnected after its replies, as on any upstream loss, and reconnects.
// New connections go to the new master.
//
// Fence closes the same connections when a failover is about to promote a
// replica (dataplane/sentinel says when), and refuses new ones until
// SetMaster: the old master stays reachable, and a master, for a second
// or more after the promotion, and every write it acknowledged then would
// be lost when it resynchronises from the new master. Clients get an
// error at once meanwhile, never a reply from the old master.
//
// Every connection dialed in FollowMaster mode is registered (tracked)
// with the address it was dialed to; SetMaster changes the address and
// takes the registered connections under one lock, so a dial racing with
// a switch either registers first (and is closed by it) or sees the new
// address and is refused. The event loop owns its descriptors outright
// (takeFD): SetMaster posts it a switch, and its dials carry the master
// generation they started under (dialGen), checked when they complete.

// errMasterSwitched answers the commands in flight on a connection closed
// by a master switch or a fence.
var errMasterSwitched = errors.New("master switched (Sentinel failover); the command may or may not have been applied")

// errFenced answers the commands sent while a failover promotes a replica
// (Fence): the old master may no longer be written to, the new one is not
// known yet.
var errFenced = errors.New("master failing over (Sentinel); retry")

// errFencedInFlight answers the commands in flight on a connection the fence
// closed: they were sent to the old master, which may have applied them, so
// unlike errFenced it does not invite a blind retry (an INCR retried would
// count twice).
var errFencedInFlight = errors.New("master failing over (Sentinel); the command may or may not have been applied")

// conns is the registry of upstream connections (FollowMaster mode).
type conns struct {
	mu   sync.Mutex
	live map[*trackedConn]struct{}
	// fenced is set and cleared under mu, read without it by dialRaw.
	fenced atomic.Bool
}

// trackedConn is an upstream connection in the registry; closing it
// leaves the registry.
type trackedConn struct {
	net.Conn
	reg *conns
}

func (c *trackedConn) Close() error {
	c.reg.mu.Lock()
	delete(c.reg.live, c)
	c.reg.mu.Unlock()
	return c.Conn.Close()
}

// untrack leaves the registry without closing the connection: the event
// loop has taken it over, and closes it on a switch itself (switchMaster).
func (c *trackedConn) untrack() net.Conn {
	c.reg.mu.Lock()
	delete(c.reg.live, c)
	c.reg.mu.Unlock()
	return c.Conn
}

// SyscallConn lets the event loop take the descriptor (takeFD).
func (c *trackedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}

// track registers u's connection, dialed to addr, unless the master moved
// away from addr meanwhile: then it is closed and an error returned.
func (p *Proxy) track(addr string, u *upstream) error {
	p.conns.mu.Lock()
	defer p.conns.mu.Unlock()
	if p.conns.fenced.Load() {
		u.conn.Close()
		return errFenced
	}
	if addr != p.topo.addr(0) {
		u.conn.Close()
		return errMasterSwitched
	}
	if p.conns.live == nil {
		p.conns.live = map[*trackedConn]struct{}{}
	}
	tc := &trackedConn{Conn: u.conn, reg: &p.conns}
	p.conns.live[tc] = struct{}{}
	u.conn = tc
	return nil
}

// Master is the upstream address in use (standalone mode: the master).
func (p *Proxy) Master() string { return p.topo.addr(0) }

// SetMaster moves the upstream to addr (FollowMaster mode), and lifts a
// fence: new connections go to addr, and every connection to the old
// address is closed. It reports whether the address changed.
func (p *Proxy) SetMaster(addr string) (bool, error) {
	if !p.cfg.FollowMaster || p.cfg.Cluster {
		return false, errors.New("proxy: SetMaster needs FollowMaster in standalone mode")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return false, fmt.Errorf("proxy: master %q: %w", addr, err)
	}
	p.conns.mu.Lock()
	old := p.topo.addr(0)
	wasFenced := p.conns.fenced.Load()
	p.conns.fenced.Store(false)
	if old == addr {
		p.conns.mu.Unlock()
		if wasFenced {
			p.log.Info("upstream master resumed after a fence", "master", addr)
		}
		return false, nil
	}
	p.topo.setMaster(addr)
	n := p.closeTrackedLocked()
	p.log.Info("upstream master switched", "from", old, "to", addr, "connections_closed", n)
	return true, nil
}

// Fence stops all traffic to the master (FollowMaster mode) until
// SetMaster: a failover is promoting a replica, and a write the old master
// acknowledged from now on would be lost. Every upstream connection is
// closed, and commands get an error at once instead of a connection.
func (p *Proxy) Fence() {
	if !p.cfg.FollowMaster {
		return
	}
	p.conns.mu.Lock()
	if p.conns.fenced.Load() {
		p.conns.mu.Unlock()
		return
	}
	p.conns.fenced.Store(true)
	n := p.closeTrackedLocked()
	p.log.Info("upstream master fenced: a failover is promoting a replica", "master", p.topo.addr(0), "connections_closed", n)
}

// closeTrackedLocked closes every registered connection and the event
// loop's; p.conns.mu is held, and released.
func (p *Proxy) closeTrackedLocked() int {
	p.dialGen.Add(1)
	victims := make([]*trackedConn, 0, len(p.conns.live))
	for c := range p.conns.live {
		victims = append(victims, c)
	}
	p.conns.live = nil
	p.conns.mu.Unlock()
	for _, c := range victims {
		_ = c.Conn.Close()
	}
	if p.loop != nil {
		p.loop.switchMasterAsync()
	}
	return len(victims)
}

// setMaster replaces node 0's address (standalone mode, where node 0 is
// the only node).
func (t *topology) setMaster(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.index, t.addrs[0])
	t.addrs[0] = addr
	t.index[addr] = 0
}

// upstreamError is errUpstream, except while a failover is fenced: then the
// connection failed because the fence closed it, and the client is told
// so, not of a closed socket.
func (p *Proxy) upstreamError(addr string, err error) string {
	if p.cfg.FollowMaster && p.conns.fenced.Load() {
		err = errFencedInFlight
	}
	return errUpstream(addr, err)
}
