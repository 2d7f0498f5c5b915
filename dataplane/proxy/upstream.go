package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
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

// topology maps nodes and (in cluster mode) slots to nodes. Node indexes are
// stable for the life of the process, so sessions can index their
// connections by them.
type topology struct {
	cluster bool
	seeds   []string

	mu    sync.Mutex
	addrs []string       // by node index, append-only
	index map[string]int // addr -> node index

	// slots maps a slot to a node index; swapped whole on refresh. It is
	// the sidecar's one slot map: the engine's go-redis ClusterClient reads
	// it too (Proxy.ClusterSlots), so the two cannot disagree about where
	// a slot lives during a resharding.
	slots      atomic.Pointer[[16384]uint16]
	refreshing atomic.Bool
	// loadMu makes concurrent synchronous loads (freshSlots) share one
	// CLUSTER SLOTS; loaded is when the map in force was read.
	loadMu sync.Mutex
	loaded atomic.Int64
	// onChange, if set, is called after a refresh that changed the map.
	onChange func()
	// timeout bounds a slot-map load when its context has no deadline.
	timeout time.Duration
	dial    func(ctx context.Context, addr string) (*upstream, error)
	onError func(kind string)
}

func newTopology(seeds []string, cluster bool) *topology {
	t := &topology{cluster: cluster, seeds: seeds, index: map[string]int{}}
	for _, s := range seeds {
		t.nodeIndex(s)
	}
	return t
}

// nodeIndex returns the index of addr, adding it if new.
func (t *topology) nodeIndex(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.index[addr]; ok {
		return i
	}
	t.addrs = append(t.addrs, addr)
	t.index[addr] = len(t.addrs) - 1
	return len(t.addrs) - 1
}

func (t *topology) addr(node int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addrs[node]
}

// masters are the nodes that serve slots (node 0 before the first
// refresh), in the order of their first slot.
func (t *topology) masters() []int {
	m := t.slots.Load()
	if m == nil {
		return []int{0}
	}
	var out []int
	seen := map[uint16]bool{}
	for _, n := range m {
		if !seen[n] {
			seen[n] = true
			out = append(out, int(n))
		}
	}
	return out
}

// nodeOf is the node serving slot (node 0 before the first refresh).
func (t *topology) nodeOf(slot uint16) int {
	if m := t.slots.Load(); m != nil {
		return int(m[slot])
	}
	return 0
}

// refresh reloads the slot map with CLUSTER SLOTS from the known nodes.
func (t *topology) refresh(ctx context.Context) error {
	t.mu.Lock()
	cands := append([]string(nil), t.addrs...)
	t.mu.Unlock()
	var lastErr error
	for _, a := range cands {
		m, err := t.loadSlots(ctx, a)
		if err != nil {
			lastErr = err
			continue
		}
		old := t.slots.Swap(m)
		t.loaded.Store(time.Now().UnixNano())
		if t.onChange != nil && (old == nil || *old != *m) {
			t.onChange()
		}
		return nil
	}
	return fmt.Errorf("cluster slot map: %w", lastErr)
}

// freshSlots returns the slot map, reloading it first unless it was read
// within maxAge. Concurrent callers share one reload.
func (t *topology) freshSlots(ctx context.Context, maxAge time.Duration) (*[16384]uint16, error) {
	t.loadMu.Lock()
	defer t.loadMu.Unlock()
	if m := t.slots.Load(); m != nil && time.Since(time.Unix(0, t.loaded.Load())) < maxAge {
		return m, nil
	}
	if err := t.refresh(ctx); err != nil {
		if m := t.slots.Load(); m != nil {
			return m, nil // the last good map beats none
		}
		return nil, err
	}
	return t.slots.Load(), nil
}

// ranges lists m as contiguous ranges of one master each, in go-redis'
// form: what a ClusterClient's ClusterOptions.ClusterSlots returns.
func (t *topology) ranges(m *[16384]uint16) []redis.ClusterSlot {
	var out []redis.ClusterSlot
	for from := 0; from < len(m); {
		to := from
		for to+1 < len(m) && m[to+1] == m[from] {
			to++
		}
		out = append(out, redis.ClusterSlot{Start: from, End: to, Nodes: []redis.ClusterNode{{Addr: t.addr(int(m[from]))}}})
		from = to + 1
	}
	return out
}

// refreshAsync starts one background refresh unless one is running. It is
// called on MOVED: the redirected command itself is retried at once at the
// address the MOVED names.
func (t *topology) refreshAsync() {
	if !t.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer t.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
		defer cancel()
		if err := t.refresh(ctx); err != nil {
			t.onError("refresh")
		}
	}()
}

func (t *topology) loadSlots(ctx context.Context, addr string) (*[16384]uint16, error) {
	u, err := t.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer u.close()
	defer bound(ctx, u.conn, t.timeout)()
	u.w.Buf = resp.AppendArgs(u.w.Buf, [][]byte{[]byte("CLUSTER"), []byte("SLOTS")})
	if err := u.w.Flush(); err != nil {
		return nil, err
	}
	var p resp.Reply
	if err := u.r.ReadReply(&p); err != nil {
		return nil, err
	}
	if p.IsError() {
		return nil, fmt.Errorf("CLUSTER SLOTS on %s: %s", addr, p.Line)
	}
	ranges, err := parseClusterSlots(p.Raw)
	if err != nil {
		return nil, err
	}
	m := new([16384]uint16)
	covered := 0
	for _, rg := range ranges {
		host := rg.host
		if host == "" || host == "?" {
			host, _, _ = net.SplitHostPort(addr)
		}
		n := t.nodeIndex(net.JoinHostPort(host, strconv.Itoa(rg.port)))
		for s := rg.from; s <= rg.to; s++ {
			m[s] = uint16(n)
			covered++
		}
	}
	if covered == 0 {
		return nil, errors.New("CLUSTER SLOTS returned no slots")
	}
	return m, nil
}

type slotRange struct {
	from, to int
	host     string
	port     int
}

// slotsLimits bound a CLUSTER SLOTS reply: it is small (one entry per slot
// range), so a reply claiming huge lengths is refused, not allocated.
var slotsLimits = resp.Limits{MaxBulk: 64 << 10, MaxArgs: 1 << 16, MaxInline: 64 << 10, MaxDepth: 8}

// parseClusterSlots decodes the reply of CLUSTER SLOTS: an array of
// [from, to, [host, port, id, ...], replicas...]; only the master matters.
// Every range is validated, so a broken or hostile reply is an error, never
// an index out of the slot map.
func parseClusterSlots(raw []byte) ([]slotRange, error) {
	v, _, err := resp.Decode(raw, slotsLimits)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, errors.New("CLUSTER SLOTS: not an array")
	}
	var out []slotRange
	for _, e := range arr {
		ea, ok := e.([]any)
		if !ok || len(ea) < 3 {
			return nil, errors.New("CLUSTER SLOTS: bad entry")
		}
		from, ok1 := ea[0].(int64)
		to, ok2 := ea[1].(int64)
		if !ok1 || !ok2 || from < 0 || to < from || to >= 16384 {
			return nil, fmt.Errorf("CLUSTER SLOTS: bad slot range %v-%v", ea[0], ea[1])
		}
		master, ok := ea[2].([]any)
		if !ok || len(master) < 2 {
			return nil, errors.New("CLUSTER SLOTS: bad master")
		}
		var host string
		switch h := master[0].(type) {
		case []byte:
			host = string(h)
		case string:
			host = h
		case nil:
		default:
			return nil, errors.New("CLUSTER SLOTS: bad master host")
		}
		port, ok := master[1].(int64)
		if !ok || port <= 0 || port > 65535 {
			return nil, errors.New("CLUSTER SLOTS: bad master port")
		}
		out = append(out, slotRange{from: int(from), to: int(to), host: host, port: int(port)})
	}
	return out, nil
}

// bound makes I/O on c give up when ctx ends: at ctx's deadline, or after
// def when ctx has none, and at once when ctx is cancelled. Without it a
// stalled Redis that accepted the connection but never answers would block
// the reader forever (dialRaw clears deadlines). The returned func releases
// the watch and clears the deadline.
func bound(ctx context.Context, c net.Conn, def time.Duration) (release func()) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(def)
	}
	_ = c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		_ = c.SetDeadline(time.Time{})
	}
}
