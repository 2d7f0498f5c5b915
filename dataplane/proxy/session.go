package proxy

import (
	"errors"
	"net"
	"unsafe"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/proxy/order"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// maxBatch bounds how many commands one pipeline round forwards before
// reading replies, so that a client streaming without pause still gets
// answers and memory stays bounded.
const maxBatch = 1024

// sessionBatch is maxBatch for sessions: a session holds the replies of its
// batch until it writes them, so its batch bounds what a client that does
// not read can make it hold.
const sessionBatch = 256

// flushAbove is how much of a batch's replies a dedicated session holds
// before it writes them to the client: a client that does not read then
// stops the session (and its upstream connection) instead of filling the
// proxy's memory.
const flushAbove = 64 << 10

// pend is one reply owed to the client, in order.
type pend struct {
	node int32
	// off/end locate the raw command in rawlog (cluster mode, for redirects).
	off, end int32
	// swallow drops the reply (a MULTI sent late, session state replayed on
	// another node).
	swallow bool
	// key is set for reads when an Observer wants their reply size.
	key string
	// invalidate lists the mitigated keys of a command written raw: the
	// engine drops their cached copies once Redis has applied the write (not
	// before, or a concurrent read could cache the old value again).
	invalidate []string
	shed       shedTimer // the reply's wait, for a shed key's limiter
	// undo takes back the remembered AUTH, HELLO or SELECT this command
	// set, if Redis refuses it.
	undo undo
	// frames is the number of frames the command is answered with when it
	// is not one (UNSUBSCRIBE naming channels); they may be RESP3 pushes.
	frames int32
	// streamed: the command was passed on as it arrived (bigvalue.go), so
	// it cannot be sent again after a redirect.
	streamed bool
}

type session struct {
	p    *Proxy
	conn net.Conn
	cr   *resp.Reader
	cw   *resp.Writer
	cmd  resp.Command
	rep  resp.Reply
	// streamed counts the bytes of s.rep readReply already passed on, so
	// the Observer is told the whole reply's size.
	streamed int

	ups     []*upstream // by node index
	pend    []pend
	rawlog  []byte
	prelude connState // AUTH/HELLO/SELECT, replayed on new upstreams
	// stickyState is set once the client sent a command leaving state the
	// proxy cannot replay (CLIENT SETNAME, CLIENT TRACKING, READONLY, ...);
	// RESET clears it. With it (or inside MULTI/WATCH) a lost upstream
	// connection loses the client's state, so stateLost ends the session
	// instead of reconnecting silently.
	stickyState bool
	// stateLost is the failure of the upstream connection that carried
	// the client's state (nil: none lost).
	stateLost error
	proto     int
	// blocking is set when the current batch holds a blocking command.
	blocking bool
	// woffKnown: whether Redis sets the write offset after every command
	// (1) or not (2), once a WAIT asked (0: not yet; wait.go).
	woffKnown int8
	// replyOff and skipNext are the client's CLIENT REPLY mode, applied by
	// the proxy (Redis never sees CLIENT REPLY); quiet is set while the
	// command being handled must get no reply.
	replyOff, skipNext, quiet bool
	// holding: replies are being collected to be read back (roundTrip),
	// so drain must not write them to the client.
	holding bool
	// roundTripTo, if set, names the node of each command of a roundTrip.
	roundTripTo []int
	// tracking: the client turned CLIENT TRACKING on, so Redis may push
	// invalidations on its connection at any time (RESP3): they are
	// relayed while the session waits for the client's next command.
	tracking bool

	// cluster transaction pinning
	pinned     int
	pinPending bool
	inTx       bool
	watching   bool
	// txRefused: the proxy refused a command of the open transaction
	// (session_tx.go), so its EXEC answers EXECABORT and runs nothing.
	txRefused bool

	// db is the client's database as the proxy sent it (unknownDB when it
	// cannot tell), dbSeq numbers its changes, txSelect marks a SELECT
	// queued in the open transaction (session_db.go).
	db       int32
	dbSeq    uint64
	txSelect bool

	nFwd, nEng, nLocal float64
	// padded holds a streamed command's arguments (bigArgs).
	padded [][]byte

	// Multiplexed mode (standalone, until the client touches connection
	// state): commands collect in sbuf and go through a shared connection;
	// the replies land in cw.Buf, their lengths in rlens, then wake fires.
	dedicated bool
	sbuf      []byte
	rlens     []int32
	wake      chan struct{}
	poolSlot  int
	// partial carries the parts of a large reply the shared connection's
	// reader passes on; partialDone says they are written.
	partial     chan []byte
	partialDone chan struct{}
	sh          *shared // the shared connection last used
	// pre is the connection on which the event loop already wrote the
	// session's first command (loop.presend), preRest the part of it the
	// socket did not take: the session's write of that command sends only
	// preRest (see send).
	pre     *upstream
	preRest []byte
	// fence is up from the moment the session took a connection of its
	// own for a command until Redis answered that command.
	fence *order.Fence
	// arr is the session's place in the order its client's bytes came
	// (order/arrivals_linux.go); ordered says it has one.
	arr     *order.Member
	ordered bool
	// readingAhead: watchClient reads the client (set before its
	// goroutine starts, cleared after it ended).
	readingAhead bool
	// handing: the next command is the one the event loop handed the
	// client over with, unwritten (handedOver).
	handing bool
}

func newSession(p *Proxy, c net.Conn) *session {
	return &session{
		p: p, conn: c,
		cr:          resp.NewReader(c, 16<<10, p.cfg.Limits),
		cw:          resp.NewWriter(c, 16<<10),
		proto:       2,
		pinned:      -1,
		wake:        make(chan struct{}, 1),
		partial:     make(chan []byte),
		partialDone: make(chan struct{}),
		dedicated:   p.cfg.SharedConns < 0,
		poolSlot:    int(p.sessionSeq.Add(1)),
	}
}

func (s *session) closeUpstreams() {
	for _, u := range s.ups {
		u.close()
	}
}

// run serves the connection until the client leaves, sends a malformed
// frame, or the proxy drains.
func (s *session) run() {
	defer s.conn.Close()
	defer s.closeUpstreams()
	defer s.releaseFence()
	if s.arr = s.p.arrivals.Add(s.conn); s.arr != nil {
		s.ordered = true
		defer s.p.arrivals.Remove(s.arr) // before the socket is closed
		s.cr.SetSource(arrivalIO{s})
		buf := s.cw.Buf
		s.cw = resp.NewWriter(arrivalIO{s}, 0)
		s.cw.Buf = buf
	}
	if len(s.pend) > 0 {
		// Commands the event loop sent on this session's behalf before
		// handing the client over (in the order it read them). As below,
		// the session counts as reading before the replies go out: what
		// the client sends on seeing them is ordered.
		s.drain()
		s.p.arrivals.Reading(s.arr, false)
		if err := s.cw.Flush(); err != nil {
			return
		}
	}
	for {
		stop := s.relayPushes()
		err := s.cr.ReadCommand(&s.cmd)

		stop()
		if err == nil {
			s.p.arrivals.Wait(s.arr)
		}
		for err == nil {
			var done bool
			done, err = s.handle()
			if done || err != nil {
				break
			}
			if s.cr.Buffered() == 0 || len(s.pend) >= sessionBatch {
				break
			}
			var ok bool
			ok, err = s.cr.TryCommand(&s.cmd)
			if !ok {
				break
			}
		}
		s.p.arrivals.Handled(s.arr)
		s.drain()
		// From the moment its replies go out, what the client sends
		// comes after them: the session counts as reading again.
		s.p.arrivals.Reading(s.arr, false)
		s.releaseFence()
		if resp.IsProtocolError(err) {
			s.p.m.protocolErrors.Inc()
			s.cw.Buf = resp.AppendError(s.cw.Buf, "ERR "+err.Error())
			s.p.log.Info("closing client connection after a malformed frame", "remote", s.conn.RemoteAddr().String(), "err", err)
		}
		if ferr := s.cw.Flush(); ferr != nil && err == nil {
			err = ferr
		}
		s.flushMetrics()
		if err != nil || s.p.draining.Load() {
			return
		}
		if s.stateLost != nil {
			// The client's errors are written; closing tells it its
			// connection state is gone, as a direct connection's loss would.
			s.p.log.Info("closing client connection: upstream connection with its state lost", "remote", s.conn.RemoteAddr().String(), "cause", s.stateLost.Error())
			return
		}
	}
}

func (s *session) flushMetrics() {
	m := s.p.m
	if s.nFwd > 0 {
		m.forwarded.Add(s.nFwd)
		m.batches.Inc()
	}
	if s.nEng > 0 {
		m.engine.Add(s.nEng)
	}
	if s.nLocal > 0 {
		m.local.Add(s.nLocal)
	}
	s.nFwd, s.nEng, s.nLocal = 0, 0, 0
}

// errQuit ends the session after the pending replies are written.
var errQuit = errors.New("quit")

// handle processes s.cmd: forwards it, or answers it. done ends the batch
// early (the session goes on); a non-nil error ends the session.
func (s *session) handle() (done bool, err error) {
	args := s.cmd.Args
	if s.cmd.Streamed {
		// A large value, not all here (bigvalue.go).
		var ok bool
		if args, ok, err = s.bigCommand(); !ok {
			return true, err
		}
	}
	if s.handing {
		s.handing = false
		s.fenceHandOver(args)
	}
	if s.pre != nil {
		defer s.checkPresented()
	}
	c := s.classifyOwn(args)
	// CLIENT REPLY OFF or SKIP in force: this command gets no reply.
	s.quiet = s.replyOff || s.skipNext
	s.skipNext = false
	if answered, done, err := s.answer(&c, args); answered {
		return done, err
	}
	return s.send1(&c, args)
}

// classifyOwn classifies args for this session; a command that needs a
// connection of its own (decided only on the shared connections) makes the
// session dedicated first, and is classified again for it.
func (s *session) classifyOwn(args [][]byte) classified {
	c := s.p.classify(args, s.mode())
	if pre := s.pre; pre != nil {
		// The loop sent it raw to this node: the slot map or the engine's
		// table may have changed since, but the command went as it decided.
		c.node, c.mitigated = pre.node, false
	}
	if c.route.op == opHello && !s.helloShared(c.route.proto) {
		c.route.op = opOwnConn // the shared connection cannot answer it: Redis will
	}
	if c.route.op != opOwnConn && c.route.op != opExclusive {
		return c
	}
	// The command changes or depends on connection state, or holds its
	// connection: from now on this client gets its own upstream
	// connection, and the command is classified again for it.
	if c.route.op == opOwnConn {
		// Until Redis has answered it, no command read after it is
		// written (order/fence.go); a blocking command or a script is not
		// answered at once and keeps no fence. Raised before the
		// replies its client's pipeline still waits for (drain): the
		// others that wait for this session's handling (drain tells
		// them it is handled) then wait for this fence.
		s.fence = s.p.fences.RaiseUnsent()
	}
	s.drain()
	s.dedicated = true
	s.p.m.dedicated.Inc()
	return s.p.classify(args, s.mode())
}

// answer serves a command whose route is not to forward it as it is: the
// proxy answers it, or serves it with several commands of its own.
// answered is false for a command to forward (send1).
func (s *session) answer(c *classified, args [][]byte) (answered, done bool, err error) {
	switch c.route.op {
	case opReplyMode:
		s.setReplyMode(replyMode(args))
	case opQuit:
		s.local(func(b []byte) []byte { return resp.AppendStatus(b, "OK") })
		return true, true, errQuit
	case opRefuse:
		s.localError(c.route.err)
		s.refusedInTx()
	case opHello:
		// answered by helloShared
	case opPipe:
		return true, true, s.subscribe(c)
	case opState:
		return true, false, s.sessionCommand()
	case opFanout:
		s.fenceClusterWide()
		s.fanout()
	case opNodeWide:
		s.fenceClusterWide()
		s.nodeWideCmd()
	case opClientKill:
		done, err = s.clientKill()
		return true, done, err
	case opWait:
		s.wait()
	case opTopology:
		s.local(func(b []byte) []byte { return append(b, topologyReply(args, s.conn.LocalAddr(), s.proto)...) })
	case opInfo:
		s.info()
	default:
		return false, false, nil
	}
	return true, false, nil
}

// send1 forwards a command (or has the engine serve it, for a mitigated
// key), keeping the transaction's bookkeeping.
func (s *session) send1(c *classified, args [][]byte) (done bool, err error) {
	if c.info.Kind == command.Multi {
		if s.p.cfg.Cluster && s.pinned < 0 {
			if s.pinPending {
				s.localError("ERR MULTI calls can not be nested")
				return false, nil
			}
			s.pinPending, s.inTx = true, true
			s.local(func(b []byte) []byte { return resp.AppendStatus(b, "OK") })
			return false, nil
		}
		s.inTx = true
	}
	var inval []string
	if c.mitigated {
		if s.mitigated(c, args) {
			if c.decision.Op == engine.OpRefuse {
				s.refusedInTx()
			}
			return false, nil
		}
		inval = invalidates(s.p.cfg.Engine, args, c.decision)
	}
	// Writes are reported here with their request size; reads once their
	// reply (and so the value size) is known, in drain.
	s.p.observeSent(c, len(s.cmd.Raw)+s.cmd.Big)
	if c.blocking {
		s.blocking = true
	}
	if c.info.Kind == command.EndTx {
		if s.txRefused && s.inTx && command.EqFold(args[0], "EXEC") {
			s.execAborted(c.node)
			return false, nil
		}
		s.txRefused = false
		s.endTxDB(args[0])
	}
	node, unpin := s.txNode(c)
	if unpin {
		defer s.unpin()
	}
	if node < 0 {
		return false, nil
	}
	if c.sticky && (s.p.cfg.Cluster || s.dedicated) {
		s.stickyState = true
	}
	if c.tracking {
		s.tracking = c.trackingOn
	}
	if s.cmd.Streamed {
		return true, s.forwardStreamed(node, c, inval)
	}
	if s.forward(node, s.cmd.Raw, false, c.readKey) == nil {
		pd := &s.pend[len(s.pend)-1]
		pd.invalidate, pd.frames, pd.shed = inval, c.frames, startShedTimer(c.mitigated, c.decision)
	}
	return false, nil
}

// txNode keeps the transaction state of a forwarded command and returns
// the node it goes to: in a cluster, the transaction's node once pinned
// (the MULTI held back goes there first; node is -1 if it could not).
// unpin says the pin ends once the command is queued (EXEC, DISCARD, an
// UNWATCH outside MULTI).
func (s *session) txNode(c *classified) (node int, unpin bool) {
	node = c.node
	if !s.p.cfg.Cluster {
		switch c.info.Kind {
		case command.Watch:
			s.watching = true
		case command.Unwatch:
			s.watching = false
		case command.EndTx:
			s.inTx, s.watching = false, false
		}
		return node, false
	}
	if s.pinned >= 0 {
		node = s.pinned
	}
	if s.pinPending {
		// The transaction goes to the node of its first keyed command.
		s.pinPending = false
		s.pinned = node
		if err := s.forward(node, []byte("*1\r\n$5\r\nMULTI\r\n"), true, ""); err != nil {
			return -1, false
		}
	}
	switch c.info.Kind {
	case command.Watch:
		s.watching = true
		if s.pinned < 0 {
			s.pinned = node
		}
	case command.Unwatch:
		s.watching = false
		unpin = !s.inTx
	case command.EndTx:
		s.inTx, s.watching = false, false
		unpin = true
	}
	return node, unpin
}

// mode is what classify needs to know of this session.
func (s *session) mode() mode {
	return mode{shared: !s.p.cfg.Cluster && !s.dedicated, cluster: s.p.cfg.Cluster, proto: s.proto, inTx: s.inTx || s.pinPending, db: s.db}
}

func (s *session) unpin() { s.pinned = -1 }

// invalidate drops the cached copies of the mitigated keys a raw write
// named.
func (s *session) invalidate(pd *pend) {
	for _, k := range pd.invalidate {
		s.p.cfg.Engine.Invalidate(k)
	}
}

// forward queues raw for node. On a dial failure the client gets an error
// reply in order.
func (s *session) forward(node int, raw []byte, swallow bool, key string) error {
	if s.quiet {
		swallow = true
	}
	if !s.p.cfg.Cluster && !s.dedicated {
		s.sbuf = append(s.sbuf, raw...)
		s.pend = append(s.pend, pend{key: key})
		s.nFwd++
		return nil
	}
	u, err := s.upstream(node)
	if err != nil {
		if !swallow {
			s.localError(errUnreachable(s.p.topo.addr(node), err))
		}
		return err
	}
	s.send(u, raw)
	u.queued++
	pd := pend{node: int32(node), swallow: swallow, key: key}
	if s.p.cfg.Cluster {
		pd.off = int32(len(s.rawlog))
		s.rawlog = append(s.rawlog, raw...)
		pd.end = int32(len(s.rawlog))
	}
	s.pend = append(s.pend, pd)
	if !swallow {
		s.nFwd++
	}
	return nil
}

// upstream returns the session's connection to node: one taken from the
// warm pool (or dialled when the pool has none ready), with the session's
// state (AUTH, HELLO, SELECT) queued ahead of the first command as
// replies to swallow, so nothing waits for a round trip here.
func (s *session) upstream(node int) (*upstream, error) {
	for len(s.ups) <= node {
		s.ups = append(s.ups, nil)
	}
	if u := s.ups[node]; u != nil {
		return u, nil
	}
	if s.stateLost != nil {
		return nil, errStateLost
	}
	u, err := s.p.warm.take(node)
	if err != nil {
		if s.p.cfg.Cluster {
			// The node may have failed over: reload the slot map.
			s.p.topo.refreshAsync()
		}
		return nil, err
	}
	u.node = node
	s.ups[node] = u
	s.keepProto()
	s.prelude.each(func(c []byte) {
		u.w.Write(c)
		u.queued++
		s.pend = append(s.pend, pend{node: int32(node), swallow: true})
	})
	return u, nil
}

// local appends a reply produced by the proxy, after every reply owed
// before it.
func (s *session) local(f func([]byte) []byte) {
	s.drain()
	if !s.quiet {
		s.cw.Buf = f(s.cw.Buf)
	}
	s.nLocal++
}

func (s *session) localError(msg string) {
	s.local(func(b []byte) []byte { return resp.AppendError(b, msg) })
}

// slotOf is the cluster slot of key (routing.SlotBytes: the same function
// the control plane uses, without converting the key to a string).
func slotOf(key []byte) uint16 { return routing.SlotBytes(key) }

// unsafeString views b as a string for a lookup that does not keep it.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// relay appends a reply made or read back by the session, in order.
func (s *session) relay(b []byte) {
	s.local(func(out []byte) []byte { return append(out, b...) })
}
