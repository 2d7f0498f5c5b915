package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/dataplane/upstream"
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
	// mu guards conn, replies, id and resp2.
	mu      sync.Mutex
	conn    net.Conn
	replies chan respReply
	// id is conn's CLIENT ID: RESP2 fills (resp2, opened lazily) track
	// their keys with CLIENT TRACKING ON REDIRECT id, so that conn gets
	// their invalidations too; resp2 is closed with conn (its redirection
	// would point nowhere).
	id    string
	resp2 *rawConn
	// resp2Mu serialises the requests on resp2.
	resp2Mu sync.Mutex
}

// respReply is one reply of the tracking connection: its bytes (an error
// reply included), or a failure to read it.
type respReply struct {
	raw []byte
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

// trackerFor returns the tracker of key's node.
func (ts *trackers) trackerFor(ctx context.Context, key string) (*tracker, error) {
	opts, err := ts.e.nodeOptions(ctx, key)
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return nil, errClosed
	}
	// One connection per node and database: a connection reads (and
	// tracks) one database.
	id := opts.Addr + "/" + strconv.Itoa(opts.DB)
	tr := ts.m[id]
	if tr == nil {
		tr = &tracker{t: ts, opts: opts}
		ts.m[id] = tr
	}
	return tr, nil
}

// get reads key through the tracking connection of its node.
func (ts *trackers) get(ctx context.Context, key string) ([]byte, bool, error) {
	tr, err := ts.trackerFor(ctx, key)
	if err != nil {
		return nil, false, err
	}
	raw, err := tr.do(ctx, encodeCommand("GET", key))
	if err != nil {
		return nil, false, err
	}
	v, _, err := resp.Decode(raw, resp.ReplyLimits())
	if err != nil {
		return nil, false, err
	}
	if re, ok := v.(resp.Error); ok {
		return nil, false, re
	}
	switch v := v.(type) {
	case nil:
		return nil, false, nil
	case []byte:
		return v, true, nil
	}
	return nil, false, fmt.Errorf("heatsink: unexpected GET reply %T", v)
}

// request sends a cacheable read of key (args) in RESP proto so that the
// server tracks key for this engine: on the tracking connection itself in
// RESP3, on a RESP2 connection redirecting its invalidations to it in
// RESP2. It returns the reply's bytes, an error reply included.
func (ts *trackers) request(ctx context.Context, key string, args [][]byte, proto int) ([]byte, error) {
	tr, err := ts.trackerFor(ctx, key)
	if err != nil {
		return nil, err
	}
	if proto == 3 {
		return tr.do(ctx, resp.AppendArgs(nil, args))
	}
	return tr.doResp2(ctx, args)
}

// doResp2 sends one request on the tracker's RESP2 connection, opening it
// (and the tracking connection it redirects to) first if needed.
func (tr *tracker) doResp2(ctx context.Context, args [][]byte) ([]byte, error) {
	tr.resp2Mu.Lock()
	defer tr.resp2Mu.Unlock()
	tr.mu.Lock()
	conn, c2, id := tr.conn, tr.resp2, tr.id
	tr.mu.Unlock()
	if conn == nil {
		// Connect the tracking connection: PING through do.
		if _, err := tr.do(ctx, encodeCommand("PING")); err != nil {
			return nil, err
		}
		tr.mu.Lock()
		conn, c2, id = tr.conn, tr.resp2, tr.id
		tr.mu.Unlock()
		if conn == nil {
			return nil, errors.New("heatsink: tracking connection lost")
		}
	}
	if c2 == nil {
		var err error
		if c2, err = dialRaw(ctx, tr.opts, 2, false, id); err != nil {
			return nil, err
		}
		tr.mu.Lock()
		if tr.conn != conn {
			// The tracking connection failed meanwhile: the
			// redirection points nowhere.
			tr.mu.Unlock()
			_ = c2.conn.Close()
			return nil, errors.New("heatsink: tracking connection lost")
		}
		tr.resp2 = c2
		tr.mu.Unlock()
	}
	b, err := c2.do(ctx, args)
	if err != nil {
		tr.fail(conn)
	}
	return b, err
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
		if tr.resp2 != nil {
			_ = tr.resp2.conn.Close()
		}
		tr.mu.Unlock()
	}
}

// do sends one encoded command and waits for its reply's bytes,
// connecting first if needed.
func (tr *tracker) do(ctx context.Context, req []byte) ([]byte, error) {
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
	if _, err := conn.Write(req); err != nil {
		tr.fail(conn)
		return nil, err
	}
	select {
	case r, ok := <-replies:
		if !ok {
			return nil, errors.New("heatsink: tracking connection lost")
		}
		return r.raw, r.err
	case <-ctx.Done():
		// The reply may still come; the connection is out of step.
		tr.fail(conn)
		return nil, ctx.Err()
	}
}

// connect opens a RESP3 connection with tracking on and starts its reader.
func (tr *tracker) connect(ctx context.Context) (net.Conn, chan respReply, error) {
	// The client's own dialer (the sidecar's, or the Sentinel master's)
	// reaches the node as its connections do.
	conn, err := dialNode(ctx, tr.opts)
	if err != nil {
		return nil, nil, err
	}
	br := resp.NewReader(conn, 4096, resp.DefaultLimits())
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	user, pass := optionsCredentials(tr.opts)
	hello := upstream.HelloArgs(3, user, pass)
	setup := [][]string{hello, {"CLIENT", "TRACKING", "ON"}, {"CLIENT", "ID"}}
	if tr.opts.DB != 0 {
		// The fills read the table's database, as the client's own
		// connections would.
		setup = append(setup, []string{"SELECT", strconv.Itoa(tr.opts.DB)})
	}
	var id string
	for _, cmd := range setup {
		if _, err := conn.Write(encodeCommand(cmd...)); err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
		v, err := readReply(br)
		if err != nil {
			_ = conn.Close()
			return nil, nil, fmt.Errorf("heatsink: tracking connection: %s: %v", cmd[0], err)
		}
		if n, ok := v.(int64); ok && cmd[0] == "CLIENT" && cmd[1] == "ID" {
			id = strconv.FormatInt(n, 10)
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
	tr.conn, tr.replies, tr.id = conn, replies, id
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
		var rep resp.Reply
		if err := br.ReadReply(&rep); err != nil {
			return
		}
		if rep.IsPush() {
			v, _, err := resp.Decode(rep.Raw, resp.ReplyLimits())
			p, ok := v.(resp.Push)
			if err != nil || !ok {
				return
			}
			if len(p) == 2 && string(asBytes(p[0])) == "invalidate" {
				keys, _ := p[1].([]any)
				if p[1] == nil {
					c.invalidateAll()
				}
				for _, k := range keys {
					key := string(asBytes(k))
					c.invalidate(key)
					tr.t.e.forgetFlights(key)
				}
			}
			continue
		}
		select {
		case replies <- respReply{raw: append([]byte(nil), rep.Raw...)}:
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
		tr.conn, tr.replies, tr.id = nil, nil, ""
		if tr.resp2 != nil {
			_ = tr.resp2.conn.Close()
			tr.resp2 = nil
		}
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
