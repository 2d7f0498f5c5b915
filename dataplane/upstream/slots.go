package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/dataplane/resp"
)

// Nodes is the sidecar's one table of Redis nodes and, in cluster mode,
// its one slot map: the proxy routes its raw connections by it and the
// engine's go-redis ClusterClient reads it (ClusterSlots as its
// ClusterOptions.ClusterSlots, reloaded through OnChange), so the two
// never disagree about which node serves a slot while the cluster is
// resharded. Node indexes are stable for the life of the process (the
// proxy's sessions index their connections by them); the slot map maps a
// slot to a node index and is swapped whole on each load.
type Nodes struct {
	mu    sync.Mutex
	addrs []string       // by node index, append-only
	index map[string]int // addr -> node index

	slots      atomic.Pointer[[16384]uint16]
	refreshing atomic.Bool
	// loadMu makes concurrent synchronous loads (Fresh) share one
	// CLUSTER SLOTS; loaded is when the map in force was read.
	loadMu sync.Mutex
	loaded atomic.Int64

	dialer  *Dialer
	timeout time.Duration

	hooksMu  sync.Mutex
	onChange []func()
	onError  []func()
}

// NewNodes is the table of seeds (node 0 first), loading slot maps with
// d; timeout bounds a load whose context has no deadline.
func NewNodes(seeds []string, d *Dialer, timeout time.Duration) *Nodes {
	n := &Nodes{index: map[string]int{}, dialer: d, timeout: timeout}
	for _, s := range seeds {
		n.NodeIndex(s)
	}
	return n
}

// OnChange adds f, called after each load that changed the slot map.
func (n *Nodes) OnChange(f func()) {
	n.hooksMu.Lock()
	n.onChange = append(n.onChange, f)
	n.hooksMu.Unlock()
}

// OnError adds f, called when a background load (RefreshAsync) failed.
func (n *Nodes) OnError(f func()) {
	n.hooksMu.Lock()
	n.onError = append(n.onError, f)
	n.hooksMu.Unlock()
}

func (n *Nodes) run(hooks *[]func()) {
	n.hooksMu.Lock()
	fs := append([]func(){}, *hooks...)
	n.hooksMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// NodeIndex returns the index of addr, adding it if new.
func (n *Nodes) NodeIndex(addr string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i, ok := n.index[addr]; ok {
		return i
	}
	n.addrs = append(n.addrs, addr)
	n.index[addr] = len(n.addrs) - 1
	return len(n.addrs) - 1
}

// Addr is node's address.
func (n *Nodes) Addr(node int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addrs[node]
}

// SetFirst replaces node 0's address: the master a Sentinel names moved
// (standalone mode, where node 0 is the only node).
func (n *Nodes) SetFirst(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.index, n.addrs[0])
	n.addrs[0] = addr
	n.index[addr] = 0
}

// Map is the slot map in force, nil before the first load.
func (n *Nodes) Map() *[16384]uint16 { return n.slots.Load() }

// SetMap puts m in force (tests that route without a cluster).
func (n *Nodes) SetMap(m *[16384]uint16) { n.slots.Store(m) }

// Masters are the nodes that serve slots (node 0 before the first load),
// in the order of their first slot.
func (n *Nodes) Masters() []int {
	m := n.slots.Load()
	if m == nil {
		return []int{0}
	}
	var out []int
	seen := map[uint16]bool{}
	for _, x := range m {
		if !seen[x] {
			seen[x] = true
			out = append(out, int(x))
		}
	}
	return out
}

// NodeOf is the node serving slot (node 0 before the first load).
func (n *Nodes) NodeOf(slot uint16) int {
	if m := n.slots.Load(); m != nil {
		return int(m[slot])
	}
	return 0
}

// Refresh reloads the slot map with CLUSTER SLOTS from the known nodes.
func (n *Nodes) Refresh(ctx context.Context) error {
	n.mu.Lock()
	cands := append([]string(nil), n.addrs...)
	n.mu.Unlock()
	var lastErr error
	for _, a := range cands {
		m, err := n.load(ctx, a)
		if err != nil {
			lastErr = err
			continue
		}
		old := n.slots.Swap(m)
		n.loaded.Store(time.Now().UnixNano())
		if old == nil || *old != *m {
			n.run(&n.onChange)
		}
		return nil
	}
	return fmt.Errorf("cluster slot map: %w", lastErr)
}

// Fresh returns the slot map, reloading it first unless it was read
// within maxAge. Concurrent callers share one reload.
func (n *Nodes) Fresh(ctx context.Context, maxAge time.Duration) (*[16384]uint16, error) {
	n.loadMu.Lock()
	defer n.loadMu.Unlock()
	if m := n.slots.Load(); m != nil && time.Since(time.Unix(0, n.loaded.Load())) < maxAge {
		return m, nil
	}
	if err := n.Refresh(ctx); err != nil {
		if m := n.slots.Load(); m != nil {
			return m, nil // the last good map beats none
		}
		return nil, err
	}
	return n.slots.Load(), nil
}

// RefreshAsync starts one background reload unless one is running. The
// proxy calls it on MOVED: the redirected command itself is retried at
// once at the address the MOVED names.
func (n *Nodes) RefreshAsync() {
	if !n.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer n.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
		defer cancel()
		if err := n.Refresh(ctx); err != nil {
			n.run(&n.onError)
		}
	}()
}

// Refreshing reports a background reload under way.
func (n *Nodes) Refreshing() bool { return n.refreshing.Load() }

// slotMapMaxAge is how old a slot map may be when ClusterSlots is asked
// for it: go-redis asks after a MOVED, and a map read earlier may predate
// the move.
const slotMapMaxAge = 100 * time.Millisecond

// ClusterSlots is the slot map (reloaded first unless it was read in the
// last 100 ms) as contiguous ranges of one master each, in go-redis'
// form: the engine's ClusterOptions.ClusterSlots.
func (n *Nodes) ClusterSlots(ctx context.Context) ([]redis.ClusterSlot, error) {
	m, err := n.Fresh(ctx, slotMapMaxAge)
	if err != nil {
		return nil, err
	}
	var out []redis.ClusterSlot
	for from := 0; from < len(m); {
		to := from
		for to+1 < len(m) && m[to+1] == m[from] {
			to++
		}
		out = append(out, redis.ClusterSlot{Start: from, End: to, Nodes: []redis.ClusterNode{{Addr: n.Addr(int(m[from]))}}})
		from = to + 1
	}
	return out, nil
}

// load asks addr for CLUSTER SLOTS on a connection of its own.
func (n *Nodes) load(ctx context.Context, addr string) (*[16384]uint16, error) {
	raw, err := n.ask(ctx, addr, [][]byte{[]byte("CLUSTER"), []byte("SLOTS")})
	if err != nil {
		return nil, err
	}
	ranges, err := ParseClusterSlots(raw)
	if err != nil {
		return nil, err
	}
	m := new([16384]uint16)
	covered := 0
	for _, rg := range ranges {
		host := rg.Host
		if host == "" || host == "?" {
			host, _, _ = net.SplitHostPort(addr)
		}
		x := n.NodeIndex(net.JoinHostPort(host, strconv.Itoa(rg.Port)))
		for s := rg.From; s <= rg.To; s++ {
			m[s] = uint16(x)
			covered++
		}
	}
	if covered == 0 {
		return nil, errors.New("CLUSTER SLOTS returned no slots")
	}
	return m, nil
}

// ask dials addr, authenticates and returns the reply to cmd.
func (n *Nodes) ask(ctx context.Context, addr string, cmd [][]byte) ([]byte, error) {
	c, err := n.dialer.Conn(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer Bound(ctx, c, n.timeout)()
	user, pass, err := n.dialer.Credentials()
	if err != nil {
		return nil, err
	}
	var out []byte
	auth := AuthArgs(user, pass)
	if auth != nil {
		out = resp.AppendArgs(out, auth)
	}
	if _, err := c.Write(resp.AppendArgs(out, cmd)); err != nil {
		return nil, err
	}
	r := resp.NewReader(c, 16<<10, resp.ReplyLimits())
	var p resp.Reply
	if auth != nil {
		if err := r.ReadReply(&p); err != nil {
			return nil, err
		}
		if p.IsError() {
			return nil, fmt.Errorf("upstream AUTH: %s", strings.TrimSpace(string(p.Line)))
		}
	}
	if err := r.ReadReply(&p); err != nil {
		return nil, err
	}
	if p.IsError() {
		return nil, fmt.Errorf("%s on %s: %s", cmd[0], addr, p.Line)
	}
	return append([]byte(nil), p.Raw...), nil
}

// SlotRange is one range of CLUSTER SLOTS and its master.
type SlotRange struct {
	From, To int
	Host     string
	Port     int
}

// slotsLimits bound a CLUSTER SLOTS reply: it is small (one entry per slot
// range), so a reply claiming huge lengths is refused, not allocated.
var slotsLimits = resp.Limits{MaxBulk: 64 << 10, MaxArgs: 1 << 16, MaxInline: 64 << 10, MaxDepth: 8}

// ParseClusterSlots decodes the reply of CLUSTER SLOTS: an array of
// [from, to, [host, port, id, ...], replicas...]; only the master matters.
// Every range is validated, so a broken or hostile reply is an error, never
// an index out of the slot map.
func ParseClusterSlots(raw []byte) ([]SlotRange, error) {
	v, _, err := resp.Decode(raw, slotsLimits)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, errors.New("CLUSTER SLOTS: not an array")
	}
	var out []SlotRange
	for _, e := range arr {
		rg, err := parseSlotEntry(e)
		if err != nil {
			return nil, err
		}
		out = append(out, rg)
	}
	return out, nil
}

func parseSlotEntry(e any) (SlotRange, error) {
	ea, ok := e.([]any)
	if !ok || len(ea) < 3 {
		return SlotRange{}, errors.New("CLUSTER SLOTS: bad entry")
	}
	from, ok1 := ea[0].(int64)
	to, ok2 := ea[1].(int64)
	if !ok1 || !ok2 || from < 0 || to < from || to >= 16384 {
		return SlotRange{}, fmt.Errorf("CLUSTER SLOTS: bad slot range %v-%v", ea[0], ea[1])
	}
	master, ok := ea[2].([]any)
	if !ok || len(master) < 2 {
		return SlotRange{}, errors.New("CLUSTER SLOTS: bad master")
	}
	var host string
	switch h := master[0].(type) {
	case []byte:
		host = string(h)
	case string:
		host = h
	case nil:
	default:
		return SlotRange{}, errors.New("CLUSTER SLOTS: bad master host")
	}
	port, ok := master[1].(int64)
	if !ok || port <= 0 || port > 65535 {
		return SlotRange{}, errors.New("CLUSTER SLOTS: bad master port")
	}
	return SlotRange{From: int(from), To: int(to), Host: host, Port: int(port)}, nil
}

// Bound makes I/O on c give up when ctx ends: at ctx's deadline, or after
// def when ctx has none, and at once when ctx is cancelled. Without it a
// stalled Redis that accepted the connection but never answers would block
// the reader forever. The returned func releases the watch and clears the
// deadline.
func Bound(ctx context.Context, c net.Conn, def time.Duration) (release func()) {
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
