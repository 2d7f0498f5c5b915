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

	"github.com/heatsink-dev/heatsink/resp"
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

	// slots maps a slot to a node index; swapped whole on refresh.
	slots      atomic.Pointer[[16384]uint16]
	refreshing atomic.Bool
	dial       func(ctx context.Context, addr string) (*upstream, error)
	onError    func(kind string)
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
		t.slots.Store(m)
		return nil
	}
	return fmt.Errorf("cluster slot map: %w", lastErr)
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
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
		for s := rg.from; s <= rg.to && s < 16384; s++ {
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

// parseClusterSlots decodes the reply of CLUSTER SLOTS: an array of
// [from, to, [host, port, id, ...], replicas...]; only the master matters.
func parseClusterSlots(raw []byte) ([]slotRange, error) {
	v, _, err := decode(raw, 0)
	if err != nil {
		return nil, err
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
		from, _ := ea[0].(int64)
		to, _ := ea[1].(int64)
		master, ok := ea[2].([]any)
		if !ok || len(master) < 2 {
			return nil, errors.New("CLUSTER SLOTS: bad master")
		}
		host, _ := master[0].(string)
		port, _ := master[1].(int64)
		out = append(out, slotRange{from: int(from), to: int(to), host: host, port: int(port)})
	}
	return out, nil
}

// decode is a small, allocating decoder for the few replies the proxy reads
// for itself (never on the forwarding path).
func decode(b []byte, pos int) (any, int, error) {
	if pos >= len(b) {
		return nil, 0, errors.New("short reply")
	}
	end := pos
	for end+1 < len(b) && !(b[end] == '\r' && b[end+1] == '\n') {
		end++
	}
	if end+1 >= len(b) {
		return nil, 0, errors.New("short reply")
	}
	line := string(b[pos+1 : end])
	next := end + 2
	switch b[pos] {
	case '+', '-':
		return line, next, nil
	case ':':
		n, err := strconv.ParseInt(line, 10, 64)
		return n, next, err
	case '$':
		n, err := strconv.Atoi(line)
		if err != nil {
			return nil, 0, err
		}
		if n < 0 {
			return nil, next, nil
		}
		if next+n > len(b) {
			return nil, 0, errors.New("short reply")
		}
		return string(b[next : next+n]), next + n + 2, nil
	case '*':
		n, err := strconv.Atoi(line)
		if err != nil {
			return nil, 0, err
		}
		out := make([]any, 0, max(n, 0))
		for i := 0; i < n; i++ {
			var v any
			v, next, err = decode(b, next)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, v)
		}
		return out, next, nil
	}
	return nil, 0, fmt.Errorf("unexpected reply type %q", b[pos])
}
