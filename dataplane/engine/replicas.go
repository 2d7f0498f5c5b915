package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/heatsink-dev/heatsink/routing"
)

// Replica reads: the reads of a key whose entry has ReplicaReads go to the
// Redis replicas of its shard, round robin over those whose lag is within
// the entry's bound, and to the master when none is (or when a replica
// fails the read). While the table has such an entry, one goroutine
// discovers the shards' replicas (CLUSTER SLOTS for a cluster client, the
// table's addresses for a standalone master, Options.Replicas for anything
// else, such as Sentinel) and measures every replica's lag each check
// interval: ROLE on the master, then ROLE on each replica, the replica's
// applied offset compared with the master's recent offsets (lagOf).

// ReplicaShard is one shard's master and its replicas.
type ReplicaShard struct {
	// Slots are the inclusive cluster slot ranges the shard serves; nil
	// for the one shard of a standalone or Sentinel master.
	Slots [][2]int
	// Master is the master's host:port; empty means the master the
	// engine's client reaches (standalone, Sentinel).
	Master string
	// Replicas are the replicas' host:port addresses.
	Replicas []string
}

// ReplicaSource lists the shards and their replicas.
type ReplicaSource func(ctx context.Context) ([]ReplicaShard, error)

// rediscoverEvery is how many lag checks pass between two discoveries of
// the replicas (a failed check triggers one at the next check).
const rediscoverEvery = 10

// lagUnknown marks a replica that is down, not a replica, not linked to
// its master, or not measured yet: it serves no read.
const lagUnknown = -1

type replicaSet struct {
	e    *Engine
	view atomic.Pointer[replicaView]

	// mu serialises configure and close; the loop never takes it.
	mu   sync.Mutex
	cfg  replicaConfig
	stop chan struct{} // nil when no loop runs
	done chan struct{}
	// cmu guards clients: by address and read-only flag.
	cmu     sync.Mutex
	clients map[string]*redis.Client
	stale   atomic.Bool // rediscover at the next check
}

// replicaConfig is what of a table the loop depends on.
type replicaConfig struct {
	on    bool
	check time.Duration
	addrs []string
	db    int32
	// history is how many offsets each shard keeps: enough to measure a
	// replica within the largest maxLag of the table (historyFor).
	history int
}

func (c replicaConfig) equal(o replicaConfig) bool {
	return c.on == o.on && c.check == o.check && c.db == o.db && c.history == o.history && slices.Equal(c.addrs, o.addrs)
}

// replicaView is one discovery's shards; immutable but for the lags.
type replicaView struct {
	shards []*replicaShard
	// slots maps a slot to its shard's index (-1: none); nil when one
	// shard serves every slot.
	slots *[routing.SlotCount]int16
	// timeout bounds one read from a replica.
	timeout time.Duration
	// check is the check interval, part of the read bound (usableReplica).
	check time.Duration
}

type replicaShard struct {
	masterAddr string
	master     *redis.Client // nil: the engine's own client
	nodes      []*replicaNode
	next       atomic.Uint64
	hist       offsetHistory // the loop's only
}

type replicaNode struct {
	addr string
	c    *redis.Client
	lag  atomic.Int64 // nanoseconds, or lagUnknown
	// caughtUp is caughtUpTo of the last check, in the engine clock's
	// Unix nanoseconds (0: unknown).
	caughtUp atomic.Int64
}

// configure follows a new table: the loop runs while the table has an
// entry with ReplicaReads, and restarts (with fresh connections) when the
// settings it runs with change.
func (rs *replicaSet) configure(t *routing.Table) {
	cfg := replicaConfig{db: t.Database}
	if s := t.Replicas; s != nil {
		cfg.check, cfg.addrs = time.Duration(s.CheckMillis)*time.Millisecond, s.Addresses
		var maxLag time.Duration
		for i := range t.Entries {
			if rr := t.Entries[i].ReplicaReads; rr != nil {
				cfg.on = true
				maxLag = max(maxLag, time.Duration(rr.MaxLagMillis)*time.Millisecond)
			}
		}
		if cfg.on {
			cfg.history = historyFor(maxLag, cfg.check)
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if cfg.equal(rs.cfg) || rs.e.closed.Load() {
		return
	}
	rs.stopLocked()
	rs.cfg = cfg
	if !cfg.on {
		return
	}
	rs.stop, rs.done = make(chan struct{}), make(chan struct{})
	go rs.run(cfg, rs.stop, rs.done)
}

// close stops the loop and closes every connection to replicas.
func (rs *replicaSet) close() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.stopLocked()
	rs.cfg = replicaConfig{}
}

func (rs *replicaSet) stopLocked() {
	if rs.stop != nil {
		close(rs.stop)
		<-rs.done
		rs.stop, rs.done = nil, nil
	}
	rs.view.Store(nil)
	rs.cmu.Lock()
	for k, c := range rs.clients {
		_ = c.Close()
		delete(rs.clients, k)
	}
	rs.cmu.Unlock()
}

func (rs *replicaSet) run(cfg replicaConfig, stop, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tk := rs.e.clock.NewTicker(cfg.check)
	defer tk.Stop()
	for round := 0; ; round++ {
		if round%rediscoverEvery == 0 || rs.stale.Swap(false) {
			if err := rs.discover(ctx, cfg); err != nil {
				rs.e.m.upstreamErrors.Inc()
				rs.stale.Store(true)
			}
		}
		if v := rs.view.Load(); v != nil {
			rs.check(ctx, v, cfg.check)
		}
		select {
		case <-stop:
			return
		case <-tk.C():
		}
	}
}

// shards lists the shards: Options.Replicas, else CLUSTER SLOTS of a
// cluster client, else the table's addresses around the client's master.
func (rs *replicaSet) shards(ctx context.Context, cfg replicaConfig) ([]ReplicaShard, error) {
	if src := rs.e.opts.Replicas; src != nil {
		return src(ctx)
	}
	cc, ok := rs.e.client.(*redis.ClusterClient)
	if !ok {
		return []ReplicaShard{{Replicas: cfg.addrs}}, nil
	}
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []ReplicaShard
	byMaster := map[string]int{}
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		m := s.Nodes[0].Addr
		i, ok := byMaster[m]
		if !ok {
			i = len(out)
			byMaster[m] = i
			out = append(out, ReplicaShard{Master: m})
		}
		out[i].Slots = append(out[i].Slots, [2]int{s.Start, s.End})
		for _, n := range s.Nodes[1:] {
			if !slices.Contains(out[i].Replicas, n.Addr) {
				out[i].Replicas = append(out[i].Replicas, n.Addr)
			}
		}
	}
	return out, nil
}

// discover builds a new view, keeping the connections, lags and offset
// histories of what it already knew.
func (rs *replicaSet) discover(ctx context.Context, cfg replicaConfig) error {
	dctx, cancel := context.WithTimeout(ctx, rs.timeout(cfg.check))
	defer cancel()
	list, err := rs.shards(dctx, cfg)
	if err != nil {
		return err
	}
	_, cluster := rs.e.client.(*redis.ClusterClient)
	old := rs.view.Load()
	prev := map[string]*replicaShard{}
	if old != nil {
		for _, sh := range old.shards {
			prev[sh.masterAddr] = sh
		}
	}
	v := &replicaView{timeout: rs.timeout(cfg.check), check: cfg.check}
	if len(list) > 1 || (len(list) == 1 && list[0].Slots != nil) {
		v.slots = new([routing.SlotCount]int16)
		for i := range v.slots {
			v.slots[i] = -1
		}
	}
	rs.cmu.Lock()
	defer rs.cmu.Unlock()
	if rs.clients == nil {
		rs.clients = map[string]*redis.Client{}
	}
	used := map[string]bool{}
	client := func(addr string, readOnly bool) *redis.Client {
		k := addr
		if readOnly {
			k += " ro"
		}
		used[k] = true
		if c := rs.clients[k]; c != nil {
			return c
		}
		c := redis.NewClient(rs.clientOptions(addr, readOnly, cfg.db))
		rs.clients[k] = c
		return c
	}
	for _, s := range list {
		sh := &replicaShard{masterAddr: s.Master, hist: offsetHistory{max: cfg.history}}
		if p := prev[s.Master]; p != nil {
			sh.hist = p.hist
		}
		if s.Master != "" {
			sh.master = client(s.Master, false)
		}
		for _, a := range s.Replicas {
			n := &replicaNode{addr: a, c: client(a, cluster)}
			n.lag.Store(lagUnknown)
			if p := prev[s.Master]; p != nil {
				for _, o := range p.nodes {
					if o.addr == a {
						n.lag.Store(o.lag.Load())
						n.caughtUp.Store(o.caughtUp.Load())
					}
				}
			}
			sh.nodes = append(sh.nodes, n)
		}
		idx := int16(len(v.shards))
		v.shards = append(v.shards, sh)
		for _, r := range s.Slots {
			for slot := max(r[0], 0); slot <= r[1] && slot < routing.SlotCount; slot++ {
				v.slots[slot] = idx
			}
		}
	}
	rs.view.Store(v)
	for k, c := range rs.clients {
		if !used[k] {
			_ = c.Close()
			delete(rs.clients, k)
		}
	}
	return nil
}

// clientOptions are a replica's (or a cluster master's) connection
// options: the engine client's credentials and TLS (Options.Dialer
// instead, if set), the table's database, and READONLY on each new
// connection to a cluster replica, without which it answers MOVED.
func (rs *replicaSet) clientOptions(addr string, readOnly bool, db int32) *redis.Options {
	// No retry: a failed read goes to the master at once instead.
	o := &redis.Options{Addr: addr, DB: int(db), MaxRetries: -1}
	switch c := rs.e.client.(type) {
	case *redis.Client:
		co := c.Options()
		o.Protocol, o.Username, o.Password, o.TLSConfig = co.Protocol, co.Username, co.Password, co.TLSConfig
		o.CredentialsProvider, o.CredentialsProviderContext = co.CredentialsProvider, co.CredentialsProviderContext
		o.PoolSize = co.PoolSize // a replica takes what the master took
	case *redis.ClusterClient:
		co := c.Options()
		o.Protocol, o.Username, o.Password, o.TLSConfig = co.Protocol, co.Username, co.Password, co.TLSConfig
		o.CredentialsProvider, o.CredentialsProviderContext = co.CredentialsProvider, co.CredentialsProviderContext
		o.PoolSize = co.PoolSize
	}
	if d := rs.e.opts.Dialer; d != nil {
		o.Dialer, o.TLSConfig = d.Dial, nil
	}
	if readOnly {
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	}
	return o
}

// timeout bounds one check, one discovery and one read from a replica:
// a replica that does not answer within it is passed over, not waited for.
// It is the check interval within [500ms, 1s]: long enough that a busy
// but healthy node is not taken for a dead one, short enough that a read
// from a replica that stopped falls back to the master within a second.
func (rs *replicaSet) timeout(check time.Duration) time.Duration {
	return min(max(check, 500*time.Millisecond), time.Second)
}

// check measures every shard's replicas, the shards in parallel.
func (rs *replicaSet) check(ctx context.Context, v *replicaView, check time.Duration) {
	var wg sync.WaitGroup
	for _, sh := range v.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, rs.timeout(check))
			defer cancel()
			if !rs.checkShard(cctx, sh) {
				rs.stale.Store(true)
			}
		}()
	}
	wg.Wait()
}

// checkShard reads the master's offset, then every replica's, and stores
// each replica's lag. It reports false when the master could not be read
// or is no master any more (a failover: rediscover).
func (rs *replicaSet) checkShard(ctx context.Context, sh *replicaShard) bool {
	var do func(ctx context.Context, args ...any) *redis.Cmd
	if sh.master != nil {
		do = sh.master.Do
	} else {
		do = rs.e.rc().Do
	}
	sent := rs.e.clock.Now()
	m, err := roleOf(ctx, do)
	if err != nil || !m.master {
		for _, n := range sh.nodes {
			n.lag.Store(lagUnknown)
		}
		return false
	}
	sh.hist.add(offsetSample{at: rs.e.clock.Now(), offset: m.offset, sent: sent})
	var wg sync.WaitGroup
	for _, n := range sh.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := roleOf(ctx, n.c.Do)
			if err != nil || r.master || !r.connected {
				n.lag.Store(lagUnknown)
				return
			}
			lag, ok := lagOf(sh.hist.samples, r.offset, rs.e.clock.Now())
			if !ok {
				n.lag.Store(lagUnknown)
				return
			}
			if at, ok := caughtUpTo(sh.hist.samples, r.offset); ok {
				n.caughtUp.Store(at.UnixNano())
			} else {
				n.caughtUp.Store(0)
			}
			n.lag.Store(int64(lag))
		}()
	}
	wg.Wait()
	return true
}

func roleOf(ctx context.Context, do func(ctx context.Context, args ...any) *redis.Cmd) (role, error) {
	v, err := do(ctx, "ROLE").Slice()
	if err != nil {
		return role{}, err
	}
	return parseRole(v)
}

// pick is the replica the next read of key goes to, or nil (the master),
// and how long a read from it may take; wrote is when this process last
// wrote key (zero: not since the table listed it).
func (rs *replicaSet) pick(key string, maxLag time.Duration, wrote time.Time) (*replicaNode, time.Duration) {
	v := rs.view.Load()
	if v == nil || len(v.shards) == 0 {
		return nil, 0
	}
	sh := v.shards[0]
	if v.slots != nil {
		i := v.slots[routing.Slot(key)]
		if i < 0 {
			return nil, 0
		}
		sh = v.shards[i]
	}
	if len(sh.nodes) == 0 {
		return nil, 0
	}
	var buf [16]bool
	usable := buf[:0]
	now := rs.e.clock.Now()
	for _, nd := range sh.nodes {
		var cu time.Time
		if ns := nd.caughtUp.Load(); ns != 0 {
			cu = time.Unix(0, ns)
		}
		usable = append(usable, usableReplica(time.Duration(nd.lag.Load()), maxLag, v.check, cu, now, wrote))
	}
	i := pickReplica(usable, sh.next.Add(1)-1)
	if i < 0 {
		return nil, 0
	}
	return sh.nodes[i], v.timeout
}

// errNoReplica: the read goes to the master.
var errNoReplica = errors.New("no replica")

// replicaGet reads key (p's base key or one of its copies) from a replica
// of its shard within the entry's lag bound, and after this process's last
// write of p's key (read your writes). errNoReplica means no replica could answer: the caller reads the
// master. A replica that fails the read is passed over until the next
// check measures it again.
func (e *Engine) replicaGet(ctx context.Context, p *plan, rr *routing.ReplicaReads, key string) ([]byte, bool, error) {
	var wrote time.Time
	if ns := p.wrote.Load(); ns != 0 {
		wrote = time.Unix(0, ns)
	}
	n, timeout := e.reps.pick(key, time.Duration(rr.MaxLagMillis)*time.Millisecond, wrote)
	if n == nil {
		return nil, false, errNoReplica
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := n.c.Get(rctx, key).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		e.m.replicaReads.Inc()
		return nil, false, nil
	case err != nil:
		n.lag.Store(lagUnknown)
		e.m.replicaFallbacks.Inc()
		return nil, false, errNoReplica
	}
	e.m.replicaReads.Inc()
	return b, true, nil
}

// ReplicaLags reports the last measured lag of every replica the engine
// reads from, by address (negative: not usable), for tests and
// diagnostics.
func (e *Engine) ReplicaLags() map[string]time.Duration {
	out := map[string]time.Duration{}
	if v := e.reps.view.Load(); v != nil {
		for _, sh := range v.shards {
			for _, n := range sh.nodes {
				out[n.addr] = time.Duration(n.lag.Load())
			}
		}
	}
	return out
}
