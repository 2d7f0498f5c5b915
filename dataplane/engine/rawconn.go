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

// Raw connections: the cacheable reads of other types than strings
// (readreq.go) are answered with Redis' own reply bytes, in the protocol
// of the client that sent them (an HGETALL is a map in RESP3 and a flat
// array in RESP2; a ZSCORE a double or a bulk string; ZRANGE WITHSCORES an
// array of pairs or a flat array), which go-redis' parsed replies cannot
// give back byte for byte. So the engine keeps a few connections of its own
// per node, database and protocol, speaking RESP itself: one request, one
// reply, read whole. Fills are rare (one per request per TTL), so a few
// connections per node suffice.

// rawPerNode bounds the connections to one node in one protocol: fills
// beyond it wait for one to be free.
const rawPerNode = 4

// rawPool holds the raw connections by node, database, protocol and
// read-only flag (a cluster replica's need READONLY).
type rawPool struct {
	mu     sync.Mutex
	m      map[string]*rawNode
	closed bool
}

type rawNode struct {
	opts     *redis.Options
	proto    int
	readOnly bool
	// slots holds one token per connection that may be opened; idle the
	// connections not in use.
	slots chan struct{}
	idle  chan *rawConn
}

type rawConn struct {
	conn net.Conn
	br   *resp.Reader
}

// node returns the pool's node for opts (its Addr and DB), protocol and
// read-only flag, or nil after close.
func (rp *rawPool) node(opts *redis.Options, proto int, readOnly bool) *rawNode {
	id := opts.Addr + "/" + strconv.Itoa(opts.DB) + "/" + strconv.Itoa(proto)
	if readOnly {
		id += "/ro"
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.closed {
		return nil
	}
	if rp.m == nil {
		rp.m = map[string]*rawNode{}
	}
	n := rp.m[id]
	if n == nil {
		n = &rawNode{opts: opts, proto: proto, readOnly: readOnly, slots: make(chan struct{}, rawPerNode), idle: make(chan *rawConn, rawPerNode)}
		for range rawPerNode {
			n.slots <- struct{}{}
		}
		rp.m[id] = n
	}
	return n
}

// closeAll closes every idle connection; those in use are closed by their
// request when it ends (it finds the pool closed).
func (rp *rawPool) closeAll() {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rp.closed = true
	for _, n := range rp.m {
		n.drain()
	}
}

func (n *rawNode) drain() {
	for {
		select {
		case c := <-n.idle:
			_ = c.conn.Close()
			n.slots <- struct{}{}
		default:
			return
		}
	}
}

// errRawClosed: the engine closed while a raw read waited.
var errRawClosed = errors.New("heatsink: engine closed")

// do sends one request and returns its reply's bytes (a copy), an error
// reply included; err is a failure to reach the node. asking sends ASKING
// first, on the same connection (a cluster slot being migrated).
func (rp *rawPool) do(ctx context.Context, n *rawNode, args [][]byte, asking bool) ([]byte, error) {
	var c *rawConn
	select {
	case c = <-n.idle:
	case <-n.slots:
		var err error
		if c, err = dialRaw(ctx, n.opts, n.proto, n.readOnly, ""); err != nil {
			n.slots <- struct{}{}
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var b []byte
	var err error
	if asking {
		b, err = c.do(ctx, toArgs([]string{"ASKING"}))
		if err == nil && (len(b) == 0 || b[0] != '+') {
			err = fmt.Errorf("heatsink: ASKING: %q", b)
		}
	}
	if err == nil {
		b, err = c.do(ctx, args)
	}
	if err != nil {
		_ = c.conn.Close()
		n.slots <- struct{}{}
		return nil, err
	}
	rp.mu.Lock()
	closed := rp.closed
	rp.mu.Unlock()
	if closed {
		_ = c.conn.Close()
		n.slots <- struct{}{}
		return b, nil
	}
	n.idle <- c
	return b, nil
}

// do writes one request and reads its reply whole; pushes (none expected
// without tracking or subscriptions) are skipped.
func (c *rawConn) do(ctx context.Context, args [][]byte) ([]byte, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	_ = c.conn.SetDeadline(dl)
	if _, err := c.conn.Write(resp.AppendArgs(nil, args)); err != nil {
		return nil, err
	}
	for {
		var rep resp.Reply
		if err := c.br.ReadReply(&rep); err != nil {
			return nil, err
		}
		if rep.IsPush() {
			continue
		}
		return append([]byte(nil), rep.Raw...), nil
	}
}

// dialRaw opens a connection to opts' node as the engine's client reaches
// it (its dialer, TLS and credentials), in RESP proto, on opts' database,
// READONLY when readOnly (a cluster replica), and with CLIENT TRACKING
// redirected to the connection redirect names when it is not "" (a RESP2
// fill whose invalidations the RESP3 tracking connection receives).
func dialRaw(ctx context.Context, opts *redis.Options, proto int, readOnly bool, redirect string) (*rawConn, error) {
	conn, err := dialNode(ctx, opts)
	if err != nil {
		return nil, err
	}
	c := &rawConn{conn: conn, br: resp.NewReader(conn, 4096, resp.ReplyLimits())}
	user, pass := optionsCredentials(opts)
	var setup [][]string
	switch {
	case proto == 3:
		setup = append(setup, upstream.HelloArgs(3, user, pass))
	case pass != "":
		setup = append(setup, toStrings(upstream.AuthArgs(user, pass)))
	}
	if opts.DB != 0 {
		setup = append(setup, []string{"SELECT", strconv.Itoa(opts.DB)})
	}
	if readOnly {
		setup = append(setup, []string{"READONLY"})
	}
	if redirect != "" {
		setup = append(setup, []string{"CLIENT", "TRACKING", "ON", "REDIRECT", redirect})
	}
	for _, cmd := range setup {
		b, err := c.do(ctx, toArgs(cmd))
		if err == nil && len(b) > 0 && (b[0] == '-' || b[0] == '!') {
			err = fmt.Errorf("heatsink: raw connection: %s: %s", cmd[0], b)
		}
		if err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	_ = conn.SetDeadline(time.Time{})
	return c, nil
}

// dialNode connects to opts' node as the engine's client does: with its
// Dialer (the sidecar's upstream.Dialer, or the Sentinel master's), or
// else with the one TLS dial of dataplane/upstream and the client's TLS
// configuration.
func dialNode(ctx context.Context, opts *redis.Options) (net.Conn, error) {
	if opts.Dialer != nil {
		return opts.Dialer(ctx, "tcp", opts.Addr)
	}
	return (&upstream.Dialer{TLS: opts.TLSConfig}).Conn(ctx, opts.Addr)
}

// optionsCredentials are the credentials of opts for a new connection.
func optionsCredentials(opts *redis.Options) (user, pass string) {
	if opts.CredentialsProvider != nil {
		return opts.CredentialsProvider()
	}
	return opts.Username, opts.Password
}

func toStrings(b [][]byte) []string {
	out := make([]string, len(b))
	for i, a := range b {
		out[i] = string(a)
	}
	return out
}

func toArgs(s []string) [][]byte {
	out := make([][]byte, len(s))
	for i, a := range s {
		out[i] = []byte(a)
	}
	return out
}
