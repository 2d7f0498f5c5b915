package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// Server-assisted invalidation (Redis CLIENT TRACKING, RESP3).
//
// Cache fills of locally cached keys go through one dedicated connection per
// Redis node, opened with HELLO 3 and CLIENT TRACKING ON. The server then
// remembers which keys that connection read and pushes an "invalidate"
// message on it when any client changes one of them, so a write made
// anywhere drops the cached value within one network delay instead of at
// the end of its TTL. Fills are rare (one per key per TTL) so each tracking
// connection carries one request at a time; a reader goroutine takes both
// replies and pushes off the socket. If a tracking connection fails, the
// invalidations it would have carried are lost, so every cached value is
// dropped; the next fill reconnects.

// trackers holds the tracking connection of each node address and
// database.
type trackers struct {
	e  *Engine
	mu sync.Mutex
	m  map[string]*tracker
	// closed is set by closeAll, under mu: a request racing Engine.Close
	// must not dial a connection (and start a reader) nobody will close.
	closed bool
}

// errClosed is returned by a cache fill after Engine.Close.
var errClosed = errors.New("heatsink: engine closed")

type tracker struct {
	t    *trackers
	opts *redis.Options

	// reqMu serialises requests; one is outstanding at a time.
	reqMu sync.Mutex
	// mu guards conn and replies.
	mu      sync.Mutex
	conn    net.Conn
	replies chan respReply
}

type respReply struct {
	v   any
	err error
}

// nodeOptions returns the options of the node that serves key, with the
// table's database (DB).
func (e *Engine) nodeOptions(ctx context.Context, key string) (*redis.Options, error) {
	rc := e.rc()
	switch c := rc.(type) {
	case *redis.Client:
		return c.Options(), nil
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return n.Options(), nil
	}
	return nil, fmt.Errorf("heatsink: CLIENT TRACKING needs a *redis.Client or *redis.ClusterClient, not %T", rc)
}

// trackedGet reads key through the tracking connection of its node.
func (ts *trackers) get(ctx context.Context, key string) ([]byte, bool, error) {
	opts, err := ts.e.nodeOptions(ctx, key)
	if err != nil {
		return nil, false, err
	}
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return nil, false, errClosed
	}
	// One connection per node and database: a connection reads (and
	// tracks) one database.
	id := opts.Addr + "/" + strconv.Itoa(opts.DB)
	tr := ts.m[id]
	if tr == nil {
		tr = &tracker{t: ts, opts: opts}
		ts.m[id] = tr
	}
	ts.mu.Unlock()
	v, err := tr.do(ctx, "GET", key)
	if err != nil {
		return nil, false, err
	}
	switch v := v.(type) {
	case nil:
		return nil, false, nil
	case []byte:
		return v, true, nil
	}
	return nil, false, fmt.Errorf("heatsink: unexpected GET reply %T", v)
}

// closeAll closes every tracking connection.
func (ts *trackers) closeAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	for _, tr := range ts.m {
		tr.mu.Lock()
		if tr.conn != nil {
			_ = tr.conn.Close()
		}
		tr.mu.Unlock()
	}
}

// do sends one command and waits for its reply, connecting first if needed.
func (tr *tracker) do(ctx context.Context, args ...string) (any, error) {
	tr.reqMu.Lock()
	defer tr.reqMu.Unlock()
	tr.mu.Lock()
	conn, replies := tr.conn, tr.replies
	tr.mu.Unlock()
	if conn == nil {
		var err error
		if conn, replies, err = tr.connect(ctx); err != nil {
			return nil, err
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetWriteDeadline(dl)
	}
	if _, err := conn.Write(encodeCommand(args...)); err != nil {
		tr.fail(conn)
		return nil, err
	}
	select {
	case r, ok := <-replies:
		if !ok {
			return nil, errors.New("heatsink: tracking connection lost")
		}
		return r.v, r.err
	case <-ctx.Done():
		// The reply may still come; the connection is out of step.
		tr.fail(conn)
		return nil, ctx.Err()
	}
}

// connect opens a RESP3 connection with tracking on and starts its reader.
func (tr *tracker) connect(ctx context.Context) (net.Conn, chan respReply, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	var conn net.Conn
	var err error
	if tr.opts.Dialer != nil {
		// The client's own dialer (the sidecar's: TLS with the current
		// CA bundle, or the Sentinel follower's) reaches the node as its
		// connections do.
		conn, err = tr.opts.Dialer(ctx, "tcp", tr.opts.Addr)
	} else if tr.opts.TLSConfig != nil {
		td := tls.Dialer{NetDialer: &d, Config: tr.opts.TLSConfig}
		conn, err = td.DialContext(ctx, "tcp", tr.opts.Addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", tr.opts.Addr)
	}
	if err != nil {
		return nil, nil, err
	}
	br := resp.NewReader(conn, 4096, resp.DefaultLimits())
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	hello := []string{"HELLO", "3"}
	user, pass := tr.opts.Username, tr.opts.Password
	if tr.opts.CredentialsProvider != nil {
		user, pass = tr.opts.CredentialsProvider()
	}
	if pass != "" {
		if user == "" {
			user = "default"
		}
		hello = append(hello, "AUTH", user, pass)
	}
	setup := [][]string{hello, {"CLIENT", "TRACKING", "ON"}}
	if tr.opts.DB != 0 {
		// The fills read the table's database, as the client's own
		// connections would.
		setup = append(setup, []string{"SELECT", strconv.Itoa(tr.opts.DB)})
	}
	for _, cmd := range setup {
		if _, err := conn.Write(encodeCommand(cmd...)); err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
		if _, err := readReply(br); err != nil {
			_ = conn.Close()
			return nil, nil, fmt.Errorf("heatsink: tracking connection: %s: %v", cmd[0], err)
		}
	}
	_ = conn.SetDeadline(time.Time{})
	replies := make(chan respReply, 1)
	// closeAll takes ts.mu then tr.mu: take them in the same order, and
	// give up if it ran while this connection was being dialled.
	tr.t.mu.Lock()
	if tr.t.closed {
		tr.t.mu.Unlock()
		_ = conn.Close()
		return nil, nil, errClosed
	}
	tr.mu.Lock()
	tr.conn, tr.replies = conn, replies
	tr.mu.Unlock()
	tr.t.mu.Unlock()
	go tr.read(conn, br, replies)
	return conn, replies, nil
}

// read takes replies and invalidation pushes off conn until it fails.
func (tr *tracker) read(conn net.Conn, br *resp.Reader, replies chan respReply) {
	defer close(replies)
	defer tr.fail(conn)
	c := tr.t.e.cache
	for {
		v, err := readReply(br)
		var re resp.Error
		if err != nil && !errors.As(err, &re) {
			return
		}
		if p, ok := v.(resp.Push); ok {
			if len(p) == 2 && string(asBytes(p[0])) == "invalidate" {
				keys, _ := p[1].([]any)
				if p[1] == nil {
					c.invalidateAll()
				}
				for _, k := range keys {
					key := string(asBytes(k))
					c.invalidate(key)
					tr.t.e.flight.Forget(key)
				}
			}
			continue
		}
		select {
		case replies <- respReply{v, err}:
		default:
			// A reply nobody waits for (its caller gave up): the
			// connection is out of step.
			return
		}
	}
}

// fail closes conn if it is still the current one and drops every cached
// value: invalidations it carried may have been lost.
func (tr *tracker) fail(conn net.Conn) {
	tr.mu.Lock()
	current := tr.conn == conn
	if current {
		tr.conn, tr.replies = nil, nil
	}
	tr.mu.Unlock()
	_ = conn.Close()
	if current {
		tr.t.e.cache.invalidateAll()
	}
}

func asBytes(v any) []byte {
	switch v := v.(type) {
	case []byte:
		return v
	case string:
		return []byte(v)
	}
	return nil
}

// encodeCommand encodes one command for the tracking connection.
func encodeCommand(args ...string) []byte {
	bs := make([][]byte, len(args))
	for i, a := range args {
		bs[i] = []byte(a)
	}
	return resp.AppendArgs(nil, bs)
}

// readReply reads one reply with the shared bounded decoder (resp): an
// error reply comes back as a resp.Error error with a nil value, a push as
// a resp.Push value.
func readReply(r *resp.Reader) (any, error) {
	v, err := r.ReadValue()
	if err != nil {
		return nil, err
	}
	if e, ok := v.(resp.Error); ok {
		return nil, e
	}
	return v, nil
}
