package proxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"time"
)

// warmPool keeps a few authenticated upstream connections per node open
// and idle, for sessions that need a connection of their own. Taking one
// costs no round trip, so a client that blocks (BLPOP) right after another
// reaches Redis after it, as with direct connections; dialling on demand
// let the later one overtake the earlier one whenever its dial was faster.
type warmPool struct {
	p    *Proxy
	size int

	mu      sync.Mutex
	idle    map[int][]*upstream // by node
	filling map[int]bool
	closed  bool
}

func newWarmPool(p *Proxy, size int) *warmPool {
	return &warmPool{p: p, size: size, idle: map[int][]*upstream{}, filling: map[int]bool{}}
}

// take returns an idle connection to node, or dials one when none is
// ready, and refills the pool behind it.
func (w *warmPool) take(node int) (*upstream, error) {
	for {
		w.mu.Lock()
		list := w.idle[node]
		var u *upstream
		if n := len(list); n > 0 {
			u = list[0]
			w.idle[node] = list[1:]
		}
		w.mu.Unlock()
		w.fill(node)
		if u == nil {
			break
		}
		if alive(u) {
			return u, nil
		}
		u.close() // Redis closed it while it waited (its timeout setting)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.p.cfg.DialTimeout)
	defer cancel()
	return w.p.dialRaw(ctx, w.p.topo.addr(node))
}

// fill dials, on a goroutine, the connections node's pool lacks.
func (w *warmPool) fill(node int) {
	if w.size <= 0 {
		return
	}
	w.mu.Lock()
	if w.closed || w.filling[node] || len(w.idle[node]) >= w.size {
		w.mu.Unlock()
		return
	}
	w.filling[node] = true
	w.mu.Unlock()
	go func() {
		defer func() {
			w.mu.Lock()
			w.filling[node] = false
			w.mu.Unlock()
		}()
		for {
			w.mu.Lock()
			full := w.closed || len(w.idle[node]) >= w.size
			w.mu.Unlock()
			if full || w.p.draining.Load() {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), w.p.cfg.DialTimeout)
			u, err := w.p.dialRaw(ctx, w.p.topo.addr(node))
			cancel()
			if err != nil {
				return // dialRaw backs off; the next take tries again
			}
			w.mu.Lock()
			if w.closed {
				w.mu.Unlock()
				u.close()
				return
			}
			w.idle[node] = append(w.idle[node], u)
			w.mu.Unlock()
		}
	}()
}

func (w *warmPool) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, list := range w.idle {
		for _, u := range list {
			u.close()
		}
	}
	w.idle = map[int][]*upstream{}
}

// alive reports whether an idle connection is still open: nothing may be
// readable on it (Redis sends nothing unasked but a close).
func alive(u *upstream) bool {
	if u.r.Buffered() > 0 {
		return false
	}
	u.conn.SetReadDeadline(time.Now())
	var b [1]byte
	_, err := u.conn.Read(b[:])
	u.conn.SetReadDeadline(time.Time{})
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// backoff spaces out dials to an address that refuses them: while Redis is
// down, commands fail at once with the last dial's error instead of each
// dialling again (about 18,000 dials a second, before). The delay doubles
// from 20 ms to at most 500 ms, with ±20 % jitter, so Redis is dialled
// again within about 0.6 s of coming back.
type backoff struct {
	mu    sync.Mutex
	state map[string]*dialState
}

type dialState struct {
	until time.Time
	delay time.Duration
	err   error
}

const (
	backoffMin = 20 * time.Millisecond
	backoffMax = 500 * time.Millisecond
)

// check returns the error of the last failed dial to addr while its
// backoff lasts, nil when a dial may go ahead.
func (b *backoff) check(addr string, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := b.state[addr]; st != nil && now.Before(st.until) {
		return st.err
	}
	return nil
}

// result records a dial's outcome.
func (b *backoff) result(addr string, now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.state, addr)
		return
	}
	if b.state == nil {
		b.state = map[string]*dialState{}
	}
	st := b.state[addr]
	if st == nil {
		st = &dialState{}
		b.state[addr] = st
	}
	st.delay = min(max(2*st.delay, backoffMin), backoffMax)
	jitter := time.Duration(rand.Int64N(int64(st.delay)*2/5+1)) - st.delay/5
	st.until, st.err = now.Add(st.delay+jitter), err
}
