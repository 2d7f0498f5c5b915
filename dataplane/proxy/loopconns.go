package proxy

import (
	"sync"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// loopConns keeps idle, between two commands, the standalone upstream
// connections on which the round trips of a command the event loop runs
// on a goroutine go (runEngine: the plain keys' parts of a multi-key
// command on a mitigated key, a command the engine finds malformed;
// runInfo: INFO, patched), by RESP version. Such a round trip takes a
// connection of its own, as every session does where the loop runs, never
// the shared ones (shared.go); keeping it for the next one spares a dial
// for each. A connection is kept only when it owes nothing and holds no
// state but its protocol (these sessions send no AUTH, SELECT or CLIENT
// command: the loop hands a client that does to a session of its own), at
// most loopIdleMax of each version.
type loopConns struct {
	mu     sync.Mutex
	idle   [4][]*upstream // by RESP version (2, 3)
	closed bool
}

const loopIdleMax = 8

// take returns an idle connection in RESP version proto still open, or nil.
func (e *loopConns) take(proto int) *upstream {
	e.mu.Lock()
	defer e.mu.Unlock()
	for n := len(e.idle[proto]); n > 0; n = len(e.idle[proto]) {
		u := e.idle[proto][n-1]
		e.idle[proto] = e.idle[proto][:n-1]
		if alive(u) {
			u.deadline = time.Time{} // alive cleared it: armed again on use
			return u
		}
		u.close() // closed by Redis, or by a switch of master
	}
	return nil
}

// give keeps u, in RESP version proto, for the next round trip if it is
// open and owes nothing, and closes it otherwise.
func (e *loopConns) give(u *upstream, proto int) {
	if u == nil || u.conn == nil {
		return
	}
	e.mu.Lock()
	if !e.closed && u.queued == 0 && u.r.Buffered() == 0 && len(e.idle[proto]) < loopIdleMax {
		u.deadline = time.Time{}
		u.conn.SetDeadline(u.deadline) // idle: Redis' timeout setting applies
		e.idle[proto] = append(e.idle[proto], u)
		u = nil
	}
	e.mu.Unlock()
	u.close()
}

func (e *loopConns) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	for v, list := range e.idle {
		for _, u := range list {
			u.close()
		}
		e.idle[v] = nil
	}
}

// loopSession is the session a command of a client of the event loop runs
// on, on a goroutine (runEngine, runInfo): dedicated, on a kept connection when the
// upstream is standalone (in a cluster it takes one per node from the warm
// pool). done gives its connection back (or closes its connections).
func (p *Proxy) loopSession(proto int) (s *session, done func()) {
	s = &session{p: p, proto: proto, pinned: -1, wake: make(chan struct{}, 1),
		cw: resp.NewWriter(nil, 512), poolSlot: int(p.sessionSeq.Add(1)), holding: true, dedicated: true}
	if p.cfg.Cluster {
		return s, s.closeUpstreams
	}
	if u := p.loopConns.take(proto); u != nil {
		u.node = 0
		s.ups = append(s.ups, u)
	}
	return s, func() {
		if len(s.ups) > 0 {
			p.loopConns.give(s.ups[0], proto)
		}
	}
}
