package sidecar

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// ejectFor is how long the engine does not dial an address again after a
// dial to it failed: its commands to that node fail at once meanwhile.
//
// Without it a node that went down cost each of the engine's commands to
// it a whole dial sequence, and the dials queued behind each other
// (go-redis' pool dials a few at a time): after a master of one of a
// split counter's shards was stopped, the engine served 80 commands a
// second instead of 800, the first failure reached a client 9 s after the
// stop, and the manager, which judges a move by the failures counted,
// took 20 s to withdraw it (test/clients TestFailingSplitPathRolledBack).
// Proxies do the same for the same reason: envoy's outlier detection and
// twemproxy's auto_eject_hosts take a failing host out for a while (30 s
// by default in both); the engine's while is short, because the node may
// be back at once (a restart, a failover's new master on the same
// address), and the next dial after it tries the node again.
const ejectFor = 500 * time.Millisecond

// dialFunc is a go-redis Options.Dialer.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ejector remembers the addresses whose last dial failed.
type ejector struct {
	mu     sync.Mutex
	failed map[string]ejection
	now    func() time.Time
}

type ejection struct {
	until time.Time
	err   error
}

// ejecting wraps dial: a dial to an address whose last dial failed less
// than ejectFor ago fails at once with that failure.
func ejecting(dial dialFunc) dialFunc {
	e := &ejector{failed: map[string]ejection{}, now: time.Now}
	return e.wrap(dial)
}

func (e *ejector) wrap(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		e.mu.Lock()
		ej, ok := e.failed[addr]
		e.mu.Unlock()
		if ok && e.now().Before(ej.until) {
			return nil, ej.err
		}
		c, err := dial(ctx, network, addr)
		e.mu.Lock()
		defer e.mu.Unlock()
		switch {
		case err == nil:
			delete(e.failed, addr)
		case ctx.Err() == nil: // the node's failure, not the caller giving up
			e.failed[addr] = ejection{until: e.now().Add(ejectFor), err: fmt.Errorf("%w (not dialed again for %v)", err, ejectFor)}
		}
		return c, err
	}
}
