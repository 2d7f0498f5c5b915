package proxy

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// shared is one upstream connection multiplexed by many sessions
// (standalone mode, sessions that never touched connection state).
//
// Why: with one upstream connection per client, every client command costs
// Redis a read and a write system call of its own, on top of the proxy's
// own four; on a machine where Redis, the proxy and the clients share two
// cores, that halves throughput. Funnelling the sessions' pipelines into a
// few connections lets one write carry the commands of many clients, and
// Redis answer them all with one read and one write.
//
// Writes are combined: the session that finds no write in progress becomes
// the writer and also sends whatever other sessions append meanwhile. One
// reader goroutine per connection hands each reply to its session, in the
// order the commands were written (Redis answers a connection in order).
type shared struct {
	p     *Proxy
	slot  int
	proto int
	// gone mirrors dead for lock-free checks by sessions.
	gone atomic.Bool

	mu      sync.Mutex
	u       *upstream
	dead    bool
	writing bool
	wbuf    []byte
	spare   []byte
	waiters []waiter
	// deadline is the connection deadline armed while replies are owed.
	deadline time.Time
	// hello is the raw reply to the HELLO this connection was opened with
	// (nil if Redis has no HELLO), given to clients that send the same.
	hello []byte
}

// waiter is one session's batch: n replies owed. stream: the session
// writes a large reply's parts as they come (it has a client to write to).
type waiter struct {
	s      *session
	n      int
	stream bool
}

// pool holds the shared connections; sessions pick one by a stable hash.
type pool struct {
	p     *Proxy
	proto int
	mu    sync.Mutex
	conns []*shared
	// dials counts the shared connections this pool set out to open: none
	// where the event loop runs (every session there is dedicated).
	dials atomic.Int64
}

func newPool(p *Proxy, proto, n int) *pool {
	return &pool{p: p, proto: proto, conns: make([]*shared, n)}
}

// get returns a live shared connection for slot i, dialing a new one when
// the last one failed.
func (pl *pool) get(i int) (*shared, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	i %= len(pl.conns)
	if c := pl.conns[i]; c != nil {
		c.mu.Lock()
		dead := c.dead
		c.mu.Unlock()
		if !dead {
			return c, nil
		}
	}
	pl.dials.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), pl.p.cfg.DialTimeout)
	defer cancel()
	u, err := pl.p.dialRaw(ctx, pl.p.topo.addr(0))
	if err != nil {
		return nil, err
	}
	c := &shared{p: pl.p, slot: i, u: u, proto: pl.proto}
	// Open the connection in the pool's protocol and keep HELLO's reply.
	u.conn.SetDeadline(time.Now().Add(pl.p.controlTimeout()))
	u.w.Buf = resp.AppendArgs(u.w.Buf, [][]byte{[]byte("HELLO"), []byte{byte('0' + pl.proto)}})
	var rep resp.Reply
	if err = u.w.Flush(); err == nil {
		err = u.r.ReadReply(&rep)
	}
	if err != nil {
		u.close()
		return nil, err
	}
	if !rep.IsError() {
		c.hello = append([]byte(nil), rep.Raw...)
	} else if pl.proto == 3 {
		u.close()
		return nil, errors.New("upstream does not speak RESP3: " + string(rep.Line))
	}
	u.conn.SetDeadline(time.Time{})
	pl.conns[i] = c
	go c.readLoop()
	return c, nil
}

func (pl *pool) close() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, c := range pl.conns {
		if c != nil {
			c.u.close()
		}
	}
}

var errSharedDead = errors.New("upstream connection lost")

// submit queues a session's batch (n commands in data) and writes it,
// together with what other sessions queue meanwhile, unless another
// session is already writing. The replies arrive in s.cw.Buf and s.wake
// is signalled once all n are there.
func (c *shared) submit(s *session, data []byte, n int) error {
	// Ordering (docs/proxy-internals.md): Go's netpoller wakes goroutines whose
	// sockets became readable together in the reverse of their order, so
	// a client whose command came first may not have read it yet. Where
	// the session has no place in the order of arrivals (order/arrivals_linux.go:
	// not Linux, or a TLS client), one yield lets that client run, read,
	// and raise its fence if it takes a connection of its own
	// (SUBSCRIBE-then-PUBLISH: 90 lost in 1,000 instead of 900); the fence
	// then holds this batch.
	if !s.ordered {
		runtime.Gosched()
	}
	c.p.fences.Wait(s.fence)
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return errSharedDead
	}
	c.wbuf = append(c.wbuf, data...)
	c.waiters = append(c.waiters, waiter{s: s, n: n, stream: !s.holding && s.conn != nil})
	if c.p.cfg.Timeout <= 0 {
		// No proxy-made timeout: Redis has none.
	} else if s.blocking {
		c.deadline = time.Time{}
		c.u.conn.SetDeadline(c.deadline)
	} else if now := time.Now(); c.deadline.IsZero() || c.deadline.Sub(now) < c.p.cfg.Timeout/2 {
		c.deadline = now.Add(c.p.cfg.Timeout)
		c.u.conn.SetDeadline(c.deadline)
	}
	if c.writing {
		c.mu.Unlock()
		return nil
	}
	c.writing = true
	for len(c.wbuf) > 0 && !c.dead {
		buf := c.wbuf
		c.wbuf = c.spare[:0]
		c.mu.Unlock()
		_, err := c.u.conn.Write(buf)
		c.mu.Lock()
		c.spare = buf[:0]
		if err != nil {
			// The reader sees the closed connection and fails every waiter.
			c.u.conn.Close()
			break
		}
	}
	c.writing = false
	c.mu.Unlock()
	return nil
}

// readLoop hands replies to their sessions until the connection fails,
// then answers every owed reply with an error so that no session hangs.
func (c *shared) readLoop() {
	r := &sharedReader{c: c}
	stream := r.stream
	var rep resp.Reply
	var err error
	for {
		if r.li == len(r.local) {
			r.take()
		}
		if err = c.readReply(&rep, stream); err != nil {
			if r.li == len(r.local) && isTimeout(err) && c.idle() {
				continue // the deadline fired as the last replies arrived
			}
			break
		}
		if rep.IsPush() {
			r.streamed = 0
			continue
		}
		if r.li == len(r.local) {
			// The read started while nothing was owed; the batch this
			// reply answers was queued since.
			r.take()
			if len(r.local) == 0 {
				err = errors.New("reply without a request")
				break
			}
		}
		r.deliver(rep.Raw)
	}
	c.fail(r.local[r.li:], err)
}

// sharedReader is readLoop's state: the waiters taken from c.waiters,
// served from index li (the two slices are swapped, not re-sliced, so
// neither reallocates), and the bytes of the reply being read that were
// passed on already (streamed), so the Observer is told the whole reply's
// size.
type sharedReader struct {
	c        *shared
	local    []waiter
	li       int
	streamed int
}

// take swaps in the waiters queued since; with none owed, the connection
// is idle and loses its deadline, so that it is kept.
func (r *sharedReader) take() {
	c := r.c
	c.mu.Lock()
	r.local, c.waiters = c.waiters, r.local[:0]
	r.li = 0
	if len(r.local) == 0 && !c.deadline.IsZero() {
		c.deadline = time.Time{}
		c.u.conn.SetDeadline(c.deadline)
	}
	c.mu.Unlock()
}

// stream passes on the received part of a large reply: its head waiter's
// session writes what has come while this reader waits (the connection's
// other replies come after it anyway).
func (r *sharedReader) stream() {
	if r.li == len(r.local) {
		r.take()
	}
	if r.li < len(r.local) && r.local[r.li].stream {
		part := r.c.u.r.TakePartial()
		r.streamed += len(part)
		r.local[r.li].s.partial <- part
		<-r.local[r.li].s.partialDone
	}
}

// deliver hands a reply to the head waiter, and wakes its session once its
// batch is answered.
func (r *sharedReader) deliver(raw []byte) {
	w := &r.local[r.li]
	w.s.cw.Buf = append(w.s.cw.Buf, raw...)
	w.s.rlens = append(w.s.rlens, int32(min(len(raw)+r.streamed, math.MaxInt32)))
	r.streamed = 0
	w.n--
	if w.n == 0 {
		w.s.wake <- struct{}{}
		w.s = nil
		r.li++
	}
}

// idle reports whether no batch waits for a reply.
func (c *shared) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters) == 0
}

// fail marks the connection dead after err and answers every reply owed,
// by local (taken by the reader) and by the waiters queued since, with an
// error.
func (c *shared) fail(local []waiter, err error) {
	c.mu.Lock()
	c.dead = true
	c.gone.Store(true)
	local = append(local, c.waiters...)
	c.waiters = nil
	c.mu.Unlock()
	c.u.conn.Close()
	if !c.p.draining.Load() { // at shutdown the pool closes its connections
		kind := "io"
		if isTimeout(err) {
			kind = "timeout"
		}
		c.p.m.upstreamErrors.WithLabelValues(kind).Inc()
	}
	msg := c.p.upstreamError(c.p.topo.addr(0), err)
	for _, w := range local {
		for ; w.n > 0; w.n-- {
			w.s.cw.Buf = resp.AppendError(w.s.cw.Buf, msg)
			w.s.rlens = append(w.s.rlens, 0)
		}
		w.s.wake <- struct{}{}
	}
}

// readReply reads the next reply into rep; while a reply is incomplete and
// large, stream is called to pass its received part on.
func (c *shared) readReply(rep *resp.Reply, stream func()) error {
	r := c.u.r
	for {
		ok, err := r.TryReply(rep)
		if err != nil || ok {
			return err
		}
		if r.Pending() >= streamAbove {
			stream()
		}
		if err := r.Fill(); err != nil {
			return err
		}
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// drainShared sends the session's multiplexed batch and waits for its
// replies (the shared connection's reader always answers, with errors if
// the connection fails).
func (s *session) drainShared() {
	n := len(s.pend)
	s.rlens = s.rlens[:0]
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		c := s.sh
		if c == nil || c.proto != s.proto || c.gone.Load() {
			if c, err = s.p.pool(s.proto).get(s.poolSlot); err != nil {
				break
			}
			s.sh = c
		}
		if err = c.submit(s, s.sbuf, n); err == nil {
			s.awaitShared()
			break
		}
	}
	if err != nil {
		for range n {
			s.cw.Buf = resp.AppendError(s.cw.Buf, errUnreachable(s.p.topo.addr(0), err))
			s.rlens = append(s.rlens, 0)
		}
	}
	e := s.p.cfg.Engine
	for i := range s.pend {
		pd := &s.pend[i]
		for _, k := range pd.invalidate {
			e.Invalidate(k)
		}
		pd.shed.done(e)
		if pd.key != "" {
			s.p.observe(pd.key, 1, 0, int(s.rlens[i]))
		}
	}
	s.pend = s.pend[:0]
	s.sbuf = s.sbuf[:0]
	s.blocking = false
}

// awaitShared waits for the shared connection's reader to hand over the
// batch's replies, writing meanwhile the parts of a large reply it passes
// on (after the replies before it), so the session holds little of it.
func (s *session) awaitShared() {
	for {
		select {
		case <-s.wake:
			return
		case chunk := <-s.partial:
			s.cw.Write(chunk)
			s.cw.Flush()
			s.partialDone <- struct{}{}
		}
	}
}

// helloShared answers, in shared mode, a HELLO with at most a protocol
// version v with the shared connection's own HELLO reply (RESP3 clients
// use a pool of RESP3 connections), so that such a client keeps sharing.
// It reports false when that connection cannot answer it: Redis will.
func (s *session) helloShared(v int) bool {
	s.drain() // what came before goes in the previous protocol
	c, err := s.p.pool(v).get(s.poolSlot)
	if err != nil || c.hello == nil {
		return false
	}
	s.proto = v
	s.local(func(b []byte) []byte { return append(b, c.hello...) })
	return true
}

// streamAbove is the size from which the part of a reply received so far
// is passed on before the rest arrives.
const streamAbove = 256 << 10
