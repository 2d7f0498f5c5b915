package proxy

import (
	"context"
	"net"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
	up "github.com/heatsink-dev/heatsink/dataplane/upstream"
)

// upstream is one connection from a session to one Redis node. Sessions own
// their upstream connections (no sharing), so connection state (SELECT,
// MULTI, WATCH, client name) stays the client's own, and a pipeline goes to
// Redis as one write and comes back as few reads.
type upstream struct {
	node int
	conn net.Conn
	r    *resp.Reader
	w    *resp.Writer
	// queued is the number of replies this connection owes.
	queued int
	// deadline is the read/write deadline last set (zero: none).
	deadline time.Time
}

func (u *upstream) close() {
	if u != nil && u.conn != nil {
		u.conn.Close()
	}
}

// topology is the proxy's view of the sidecar's one table of nodes and
// slot map (upstream.Nodes), shared with the engine's go-redis client when
// the sidecar hands it over (Config.Nodes).
type topology struct {
	*up.Nodes
}

func (t *topology) nodeIndex(addr string) int                       { return t.NodeIndex(addr) }
func (t *topology) addr(node int) string                            { return t.Addr(node) }
func (t *topology) masters() []int                                  { return t.Masters() }
func (t *topology) nodeOf(slot uint16) int                          { return t.NodeOf(slot) }
func (t *topology) refresh(ctx context.Context) error               { return t.Refresh(ctx) }
func (t *topology) refreshAsync()                                   { t.RefreshAsync() }
func (t *topology) setMaster(addr string)                           { t.SetFirst(addr) }
func bound(ctx context.Context, c net.Conn, d time.Duration) func() { return up.Bound(ctx, c, d) }
