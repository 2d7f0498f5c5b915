package capture

import (
	"net/netip"
	"time"

	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
	"github.com/heatsink-dev/heatsink/sidecarlink"
)

// segment is the part of one captured TCP packet the tracker reads: a
// client→server packet of a connection to one of the scope's endpoints,
// or (reply capture) a packet from one. client and server are its source
// and destination as decoded: for a reply, the other way round.
type segment struct {
	client, server netip.AddrPort
	seq, ack       uint32
	syn, fin, rst  bool
	// payload is what was captured of the payload, wire its length on the
	// wire: more when the kernel kept only the packet's head (replies).
	payload []byte
	wire    int
}

// Limits bound what the tracker holds. Zero fields take the defaults.
type Limits struct {
	// MaxFlows bounds the connections tracked; a new one over it is not
	// counted (after idle ones are evicted).
	MaxFlows int
	// FlowBuffer bounds the arguments kept of one command (its name and
	// those before its key).
	FlowBuffer int
	// ReorderBuffer bounds the out-of-order bytes held for one connection,
	// ReorderTotal for all: beyond them a hole is taken as lost and the
	// stream resynchronised.
	ReorderBuffer, ReorderTotal int
	// IdleTimeout evicts a connection that sent nothing for that long.
	IdleTimeout time.Duration
	// MaxKeys bounds the distinct keys aggregated per target between two
	// flushes; a new key over it is dropped and counted.
	MaxKeys int
}

// Defaults of Limits.
const (
	DefaultMaxFlows      = 16384
	DefaultReorderBuffer = 64 << 10
	DefaultReorderTotal  = 16 << 20
	DefaultIdleTimeout   = 5 * time.Minute
	DefaultMaxKeys       = 16384
)

func (l Limits) withDefaults() Limits {
	or := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	l.MaxFlows = or(l.MaxFlows, DefaultMaxFlows)
	l.FlowBuffer = or(l.FlowBuffer, DefaultFlowBuffer)
	l.ReorderBuffer = or(l.ReorderBuffer, DefaultReorderBuffer)
	l.ReorderTotal = or(l.ReorderTotal, DefaultReorderTotal)
	l.MaxKeys = or(l.MaxKeys, DefaultMaxKeys)
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	return l
}

// TrackerStats are the tracker's counters.
type TrackerStats struct {
	// Packets and Bytes (payload) handled; Commands parsed; Counted the
	// commands counted for a target (before scaling by the sampling).
	Packets, Bytes, Commands, Counted uint64
	// Flows tracked now; FlowsRefused the packets of connections not
	// tracked because MaxFlows were; Evicted the idle ones dropped.
	Flows                 int
	FlowsRefused, Evicted uint64
	// Gaps: holes in a stream (lost or over the reorder buffer); Resyncs:
	// command boundaries found after a gap or garbage; Garbage: bytes
	// skipped looking for one.
	Gaps, Resyncs, Garbage uint64
	// KeysDropped: keys over MaxKeys in one interval.
	KeysDropped uint64
	// NotServed: commands of a cluster target sent to a node that does
	// not serve their key's slot by the slot map, not counted. They are
	// the commands answered MOVED or ASK (counted where the cluster serves
	// them) and, while the map is stale, commands served at a node it
	// does not name: a high rate means the map is behind the cluster.
	NotServed uint64
	// ReplyPackets and ReplyBytes (on the wire, mostly not copied) of
	// the connections whose replies are followed; Replies matched to
	// their request and counted (ReplyEstimated: cut short, their size
	// estimated); ReplyLost: matching stopped (a hole, a header not
	// captured, commands skipped, a reply not in step, a bound), until
	// the streams are in step again; ReplyUnmatched: replies out of step
	// (none waiting, or sent before their request); ReplyOverflow: over
	// the queue's bounds.
	ReplyPackets, ReplyBytes, Replies, ReplyEstimated, ReplyLost, ReplyUnmatched, ReplyOverflow uint64
	// Targets, Endpoints and Pods describe the scope in force.
	Targets, Endpoints, Pods int
}

// tracker reassembles the client→server streams of the scope's
// connections, parses their commands and aggregates the counts per target
// and key until Flush. It is not safe for concurrent use: the capture's one
// reader drives it.
type tracker struct {
	lim   Limits
	scope Scope
	gen   uint64
	// every is the sampling: one connection in every is captured, so
	// counts are scaled by it at Flush.
	every uint32
	flows map[netip.AddrPort]*flow
	// agg holds each target's keys since the last Flush.
	agg []aggTable
	// slots are the targets' compiled slot maps (nil: standalone).
	slots    []*slotTable
	oooTotal int
	stats    TrackerStats
	// cur is the flow whose bytes are being parsed (the parser's emit).
	cur *flow
	// replyEvery: replies are followed on one connection in replyEvery of
	// those captured (0: none); eps are the scope's endpoints, which tell
	// a reply (from one) from a request (to one); replyHeld the bytes of
	// all flows' queues of requests awaiting replies.
	replyEvery uint32
	eps        map[netip.AddrPort]bool
	replyHeld  int
	// nEndpoints is len(scope.Endpoints()), for the stats of every flush.
	nEndpoints int
	// curAck is the ACK number of the reply packet being parsed.
	curAck uint32
	// batch holds counts not yet added to agg; inBlock: the reader is in a
	// ring block, and drains the batch at its end (endBlock), else each
	// packet does (aggBatch).
	batch   aggBatch
	inBlock bool
	// unbatched: every add made at once (tests: the reference the batch
	// is checked against).
	unbatched bool
}

// flow is one client connection.
type flow struct {
	server  netip.AddrPort
	next    uint32
	started bool
	// skipped: bytes were not parsed (the connection counted for no
	// target); the parser resynchronises if it later does.
	skipped bool
	ooo     []oooSeg
	oooN    int
	p       *parser
	last    int64
	gen     uint64
	targets []int
	// nodes are, per target, the server's index in its slot map.
	nodes []uint16
	// db is the connection's database, dbUnknown when the capture cannot
	// know it: it learns it from the connection's start (database 0) or
	// from a SELECT or RESET it parses, and loses it when bytes pass
	// unparsed. A connection of unknown database is counted for no
	// standalone target (a SELECT it never saw would otherwise put another
	// database's keys on the policy).
	db int
	// readonly: the connection sent READONLY (a cluster replica then
	// answers its reads). Unknown for a connection first seen midway:
	// taken as sent, since a client reads from a replica only with it.
	readonly bool
	// r follows the replies (nil: not in the reply sample).
	r *replies
}

type oooSeg struct {
	seq uint32
	b   []byte
}

// dbUnknown: the connection's database is not known (see flow.db).
const dbUnknown = -1

func newTracker(lim Limits, every, replyEvery uint32) *tracker {
	return &tracker{lim: lim.withDefaults(), every: max(every, 1), replyEvery: replyEvery, flows: map[netip.AddrPort]*flow{}}
}

// setScope replaces the scope; every connection is attributed again at its
// next packet.
func (t *tracker) setScope(s Scope) {
	t.drainAgg()
	// Queued reads name their targets by the old indices.
	for _, f := range t.flows {
		t.replyLost(f)
	}
	t.scope = s
	t.nEndpoints = len(s.Endpoints())
	t.gen++
	// Counts not yet flushed are dropped with the old targets (their
	// indices change); the capture flushes before it changes scope.
	t.agg = make([]aggTable, len(s.Targets))
	t.slots = make([]*slotTable, len(s.Targets))
	for i := range s.Targets {
		t.slots[i] = compileSlots(s.Targets[i].Slots)
	}
	if t.replyEvery > 0 {
		t.eps = map[netip.AddrPort]bool{}
		for _, e := range s.Endpoints() {
			t.eps[e] = true
		}
	}
}

// packet handles one segment at now (nanoseconds, monotonic).
func (t *tracker) packet(now int64, s *segment) {
	t.handle(now, s)
	if !t.inBlock {
		t.drainAgg()
	}
}

// beginBlock and endBlock bracket the packets of one ring block: their
// counts are added to the key tables in batches (aggBatch), the last at
// endBlock.
func (t *tracker) beginBlock() { t.inBlock = true }

func (t *tracker) endBlock() {
	t.inBlock = false
	t.drainAgg()
}

func (t *tracker) handle(now int64, s *segment) {
	f := t.flows[s.client]
	if t.replyEvery > 0 && (f == nil || f.server != s.server) && !t.eps[s.server] {
		t.reply(s) // from an endpoint: a reply
		return
	}
	t.stats.Packets++
	t.stats.Bytes += uint64(len(s.payload))
	if f == nil {
		if s.rst || (s.fin && len(s.payload) == 0) {
			return
		}
		if len(t.flows) >= t.lim.MaxFlows {
			t.sweep(now)
			if len(t.flows) >= t.lim.MaxFlows {
				t.stats.FlowsRefused++
				return
			}
		}
		f = &flow{server: s.server}
		t.flows[s.client] = f
		if t.replyEvery > 0 && Sampled(s.client, t.every*t.replyEvery) {
			f.r = t.newReplies(f)
		}
	}
	f.last = now
	if f.gen != t.gen || f.server != s.server {
		f.server = s.server
		f.targets = t.scope.attribute(s.client.Addr(), s.server)
		f.nodes = f.nodes[:0]
		for _, ti := range f.targets {
			var n uint16
			if st := t.slots[ti]; st != nil {
				n = st.node(s.server)
			}
			f.nodes = append(f.nodes, n)
		}
		f.gen = t.gen
	}
	if len(f.targets) == 0 {
		f.skipped = true
		f.p = nil // nothing of it is kept
		t.dropOOO(f)
		t.replyLost(f)
	} else {
		if f.p == nil {
			f.p = newParser(t.lim.FlowBuffer, t.emit)
			f.skipped = f.started
		}
		if f.skipped {
			t.requestGap(f)
			f.skipped = false
		}
	}
	switch {
	case s.syn:
		f.next, f.started = s.seq+1, true
		t.dropOOO(f)
		if f.p != nil {
			f.p.startSynced()
		}
		f.db, f.readonly = 0, false
		t.replyRestart(f)
	case !f.started:
		// First seen midway (opened before the capture, or its start
		// lost): whatever it selected went by unseen.
		f.next, f.started = s.seq, true
		f.db = dbUnknown
		f.readonly = true
		if f.p != nil {
			t.requestGap(f)
		}
	}
	if len(s.payload) > 0 {
		t.replyAtRequest(f, s.ack)
		t.deliver(f, s.seq, s.payload)
	}
	if s.fin || s.rst {
		t.remove(s.client, f)
	}
}

// deliver puts a payload at seq into f's stream.
func (t *tracker) deliver(f *flow, seq uint32, b []byte) {
	d := int32(seq - f.next)
	switch {
	case d < 0: // a retransmission, in part or whole
		if len(b) <= int(-d) {
			return
		}
		b = b[-d:]
	case d > 0: // a hole before it: hold it while the hole may fill
		if f.p != nil && f.oooN+len(b) <= t.lim.ReorderBuffer && t.oooTotal+len(b) <= t.lim.ReorderTotal {
			f.ooo = append(f.ooo, oooSeg{seq: seq, b: append([]byte(nil), b...)})
			f.oooN += len(b)
			t.oooTotal += len(b)
			return
		}
		// Taken as lost: resume at the earliest byte held.
		t.stats.Gaps++
		f.next = seq
		for _, o := range f.ooo {
			if int32(o.seq-f.next) < 0 {
				f.next = o.seq
			}
		}
		if f.p != nil {
			t.requestGap(f)
		}
		if seq != f.next {
			f.ooo = append(f.ooo, oooSeg{seq: seq, b: append([]byte(nil), b...)})
			f.oooN += len(b)
			t.oooTotal += len(b)
			t.drain(f)
			return
		}
	}
	t.feed(f, b)
	t.drain(f)
}

// drain feeds the held segments that are now in order.
func (t *tracker) drain(f *flow) {
	for progressed := true; progressed && len(f.ooo) > 0; {
		progressed = false
		for i := 0; i < len(f.ooo); i++ {
			o := f.ooo[i]
			d := int32(o.seq - f.next)
			if d > 0 {
				continue
			}
			f.ooo = append(f.ooo[:i], f.ooo[i+1:]...)
			f.oooN -= len(o.b)
			t.oooTotal -= len(o.b)
			i--
			if len(o.b) > int(-d) {
				t.feed(f, o.b[-d:])
			}
			progressed = true
		}
	}
}

func (t *tracker) feed(f *flow, b []byte) {
	f.next += uint32(len(b))
	if f.p == nil {
		if len(b) > 0 {
			f.db = dbUnknown // a SELECT may be in what is not parsed
		}
		return
	}
	t.cur = f
	g, r := f.p.garbage, f.p.resyncs
	f.p.feed(b)
	t.stats.Garbage += f.p.garbage - g
	t.stats.Resyncs += f.p.resyncs - r
	if f.p.garbage != g {
		t.replyLost(f) // commands were skipped: their replies cannot be matched
	}
}

// requestGap says bytes of f's requests were lost: the parser looks for
// the next command, and replies can no longer be matched to requests.
func (t *tracker) requestGap(f *flow) {
	f.p.gap()
	t.replyLost(f)
}

func (t *tracker) dropOOO(f *flow) {
	t.oooTotal -= f.oooN
	f.ooo, f.oooN = nil, 0
}

func (t *tracker) remove(client netip.AddrPort, f *flow) {
	t.dropOOO(f)
	t.replyLost(f)
	delete(t.flows, client)
}

// emit counts one parsed command of t.cur and, if its replies are
// followed, queues it for its reply.
func (t *tracker) emit(p *parser) {
	key, read := t.count(p)
	if t.cur.r != nil {
		t.expect(t.cur, p, key, read)
	}
}

// count counts one parsed command of t.cur: its first key (as the sidecar
// counts it), a read or a write by the command table, a write with its
// request's size. It returns the key and, for a read, the targets (a bit
// per index) it was counted for, which its reply's size is counted for.
func (t *tracker) count(p *parser) (key []byte, read uint64) {
	t.stats.Commands++
	f := t.cur
	if len(p.args) == 0 || p.args[0] == nil {
		return nil, 0
	}
	info := p.info
	if !p.known {
		// READONLY and READWRITE are not in the data plane's table (the
		// sidecar never forwards them); only here do they matter.
		switch {
		case command.EqFold(p.args[0], "READONLY"):
			f.readonly = true
		case command.EqFold(p.args[0], "READWRITE"):
			f.readonly = false
		}
		return nil, 0
	}
	if info.Kind == command.State {
		switch {
		case command.EqFold(p.args[0], "SELECT") && len(p.args) > 1:
			if db, ok := atoi(p.args[1]); ok {
				f.db = db
			}
		case command.EqFold(p.args[0], "RESET"):
			f.db = 0 // RESET selects database 0
		}
		return nil, 0
	}
	key = info.FirstKey(p.args)
	if len(key) == 0 {
		return nil, 0
	}
	for i, ti := range f.targets {
		if db := f.db; db != t.scope.Targets[ti].Database && (db != dbUnknown || t.slots[ti] == nil) {
			// Another database, or one not known on a standalone
			// target. A Redis Cluster has database 0 only (SELECT of any
			// other fails), so there unknown means 0.
			continue
		}
		if st := t.slots[ti]; st != nil && !st.serves(f.nodes[i], key, info.Write, f.readonly) {
			t.stats.NotServed++
			continue
		}
		// A read whose reply is followed has its size counted for the
		// targets that took its key: that must be known now. It is, with
		// the add deferred, while the table has room (batchRoom).
		if !t.unbatched && (f.r == nil || t.batchRoom(ti)) {
			t.queue(ti, key, aggItem{write: info.Write, fam: info.Family(), size: uint32(p.frame)})
			if f.r != nil && !info.Write && ti < 64 {
				read |= 1 << ti
			}
			continue
		}
		t.drainAgg()
		if t.add(ti, key, info.Write, info.Family(), p.frame) && !info.Write && ti < 64 {
			read |= 1 << ti
		}
	}
	return key, read
}

// queue defers an add (or a reply's size: it.reply) of key to target ti
// to the batch's drain.
func (t *tracker) queue(ti int, key []byte, it aggItem) {
	b := &t.batch
	it.h, it.off, it.n, it.ti = t.agg[ti].hash(key), uint32(len(b.keys)), uint32(len(key)), int32(ti)
	b.items = append(b.items, it)
	b.keys = append(b.keys, key...)
	if len(b.items) >= aggBatchMax {
		t.drainAgg()
	}
}

// batchRoom says target ti's table has room for every add pending and one
// more: each will be taken.
func (t *tracker) batchRoom(ti int) bool {
	return len(t.agg[ti].entries)+len(t.batch.items) < t.lim.MaxKeys
}

// drainAgg adds the batch's counts, in order, after a pass that brings
// each probe's first slot into the cache (aggBatch).
func (t *tracker) drainAgg() {
	b := &t.batch
	if len(b.items) == 0 {
		return
	}
	for _, it := range b.items {
		b.touched += t.agg[it.ti].touch(it.h)
	}
	for _, it := range b.items {
		key := b.keys[it.off : it.off+it.n]
		if it.reply {
			t.addReply(int(it.ti), key, it.h, it.size)
		} else {
			t.addHashed(int(it.ti), key, it.h, it.write, it.fam, int(it.size))
		}
	}
	b.items, b.keys = b.items[:0], b.keys[:0]
}

func (t *tracker) add(ti int, key []byte, write bool, fam routing.Families, size int) bool {
	return t.addHashed(ti, key, t.agg[ti].hash(key), write, fam, size)
}

// fam is the command's family (command.Info.Family: the capture keeps too
// few arguments to see the options that change it, see FamilyOf).
func (t *tracker) addHashed(ti int, key []byte, h uint64, write bool, fam routing.Families, size int) bool {
	e := t.agg[ti].entryHashed(key, h, t.lim.MaxKeys)
	if e == nil {
		t.stats.KeysDropped++
		return false
	}
	t.stats.Counted++
	e.Families |= fam
	if write {
		e.Writes++
		e.Bytes += uint32(size)
		e.Size = max(e.Size, uint32(size))
	} else {
		e.Reads++
	}
	return true
}

// flush hands every target's aggregated keys to sink, scaled by the
// sampling (the estimator: a connection is captured with probability
// 1/every, so every captured count stands for every counts), and starts
// over. The entries are valid only during the call (sink copies what it
// keeps, as the agent's sketch does).
func (t *tracker) flush(sink func(policy string, entries []sidecarlink.Entry)) {
	t.drainAgg()
	for ti := range t.agg {
		a := &t.agg[ti]
		if len(a.entries) == 0 {
			continue
		}
		for i := range a.entries {
			e := &a.entries[i]
			e.Reads *= t.every
			e.Writes *= t.every
			e.Bytes *= t.every
		}
		sink(t.scope.Targets[ti].Policy, a.entries)
		a.reset()
	}
}

// sweep evicts connections idle for IdleTimeout.
func (t *tracker) sweep(now int64) {
	for c, f := range t.flows {
		if now-f.last > int64(t.lim.IdleTimeout) {
			t.remove(c, f)
			t.stats.Evicted++
		}
	}
}

// Stats returns the counters.
func (t *tracker) statsNow() TrackerStats {
	t.drainAgg()
	s := t.stats
	s.Flows = len(t.flows)
	s.Targets, s.Endpoints, s.Pods = len(t.scope.Targets), t.nEndpoints, len(t.scope.Pods)
	return s
}
