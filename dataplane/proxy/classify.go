package proxy

import (
	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// classified is everything the proxy decides about one client command
// before any I/O. The event loop (loop.command) and sessions
// (session.handle) both take it from classify, once per command, and then
// differ only in how the bytes move.
type classified struct {
	info  command.Info
	known bool
	// route is decide's answer for the client's connection.
	route route
	// key is the first key, nil for none. It aliases the command.
	key []byte
	// node is the node serving key's slot in a cluster; 0 for a keyless
	// command and in standalone mode. A session's pinned transaction goes
	// to its own node instead.
	node int
	// mitigated: the command names a key of the engine's table; decision
	// is then how the engine serves it (engine.OpRaw: sent raw, after which
	// invalidates lists the cached copies to drop).
	mitigated bool
	decision  engine.Decision
	// readKey is the key of a read, for the Observer, which gets it with
	// the reply's size once the reply came; "" without an Observer, for a
	// write, or a keyless command.
	readKey string
	// observeWrite: a write naming a key while an Observer is set; it is
	// reported with its request's size when it is sent raw.
	observeWrite bool
	// blocking: the invocation may block in Redis (BLPOP, XREAD BLOCK).
	blocking bool
	// sticky: the command leaves connection state the proxy cannot replay
	// (CLIENT SETNAME, READONLY, ...; see leavesState).
	sticky bool
	// tracking is set for CLIENT TRACKING, trackingOn when it turns it on.
	tracking, trackingOn bool
	// frames is the number of frames an unsubscribe command is answered
	// with (command.Info.Frames); 0 for every other command.
	frames int32
}

// classify is the proxy's one classification of a client command (args[0]
// is its name), given what m says of the client's connection: decide's
// route, then the first key, its cluster node, the engine's decision and
// what the Observer is to be told. It does no I/O; it reads the engine's
// table and the slot map as they are now.
func (p *Proxy) classify(args [][]byte, m mode) classified {
	info, known := command.Lookup(args[0])
	c := classified{
		info:     info,
		known:    known,
		route:    decide(info, known, args, m),
		key:      info.FirstKey(args),
		blocking: info.IsBlocking(args),
		sticky:   info.Kind == command.Plain && leavesState(args),
	}
	if isClientSub(args, "TRACKING", 3) {
		c.tracking, c.trackingOn = true, command.EqFold(args[2], "ON")
	}
	if info.Kind == command.Unsubscribe {
		c.frames = int32(info.Frames(args))
	}
	if c.key == nil {
		if m.cluster {
			c.node = p.slotArgNode(args)
		}
		return c
	}
	if m.cluster {
		c.node = p.topo.nodeOf(slotOf(c.key))
	}
	if !p.tableDB(m.db) {
		// Another database than the table's: neither served by the
		// engine nor counted for the policy.
		return c
	}
	// Only a command naming a mitigated key does more than this: one map
	// lookup, plus one per other key of a multi-key command when the table
	// is not empty.
	if e := p.cfg.Engine; e != nil && e.Names(info, args, c.key) {
		c.mitigated = true
		c.decision = e.Decide(args, m.inTx)
	}
	if p.cfg.Observer != nil {
		p.observeFamilies(info, args, m.inTx)
		if info.Write {
			c.observeWrite = true
		} else {
			c.readKey = string(c.key)
		}
	}
	return c
}

// FamilyObserver is an Observer also told the command families of each
// key's commands (dataplane/counts.Client is): the manager chooses a key's
// moves by them, so that no move refuses a command the key's clients send.
type FamilyObserver interface {
	ObserveFamilies(policy, key string, f routing.Families)
}

// RefusalObserver is an Observer also told each command refused because
// of its key's move (dataplane/counts.Client is): the manager rolls back a
// move under which the key's clients' commands are refused.
type RefusalObserver interface {
	ObserveRefused(policy, key string)
}

// OutcomeObserver is an Observer also told the outcome of each command a
// key's move served and of each command sent raw (dataplane/counts.Client
// is): the manager withdraws a move whose path fails clearly more than
// the sidecar's direct commands, the baseline that tells a failing path
// from a failover of the whole upstream.
type OutcomeObserver interface {
	ObserveMoved(policy, key string, read, failed bool)
	ObserveRaw(policy string, read, failed bool)
}

// observeMoved reports a command on key the engine served by its move
// (not a refusal), read when it writes nothing, failed when its error is
// a failure of the move's path (engine.Failure), to the Observer, if it
// takes outcomes.
func (p *Proxy) observeMoved(key string, read bool, err error) {
	if p.outcomes != nil && key != "" {
		p.outcomes.ObserveMoved(p.cfg.Policy, key, read, engine.Failure(err))
	}
}

// observeRaw reports the reply to a command sent raw (rep nil: the
// command got none, its connection failed), for the baseline; read says
// it is a read of a key (classified.readKey set: the manager judges a
// move's reads against these), any other command is counted as a write.
func (p *Proxy) observeRaw(rep *resp.Reply, read bool) {
	if p.outcomes != nil {
		p.outcomes.ObserveRaw(p.cfg.Policy, read, rep == nil || rep.IsError() && failedReply(rep.Line))
	}
}

// writesNothing reports whether the command args writes nothing (a read,
// for the outcomes of a move: command.Info.Write unset).
func writesNothing(args [][]byte) bool {
	info, ok := command.Lookup(args[0])
	return ok && !info.Write
}

// observeRefused reports a command the engine refused because of its key's
// move (not one shed by the key's budget: shedding is what the policy
// asked for) to the Observer, if it takes refusals, under the mitigated
// key the decision names. It is called where the refusal is answered (a
// command may be classified more than once: by the event loop, then by
// the session it is handed to).
func (p *Proxy) observeRefused(d engine.Decision) {
	if p.refusals == nil || d.Op != engine.OpRefuse || d.Shed != "" || d.Entry == nil {
		return
	}
	p.refusals.ObserveRefused(p.cfg.Policy, d.Entry.Key)
}

// observeFamilies reports the family of the command for each key it names
// (command.Info.KeyFamilies) to the Observer, if it takes families.
func (p *Proxy) observeFamilies(info command.Info, args [][]byte, inTx bool) {
	if p.families == nil {
		return
	}
	info.KeyFamilies(args, inTx, func(key []byte, f routing.Families) {
		p.families.ObserveFamilies(p.cfg.Policy, unsafeString(key), f)
	})
}

// observe reports one access of key to the Observer, if one is set; every
// report of the proxy goes through it. Writes sent raw are reported with
// their request's size as they are sent, reads sent raw with their reply's
// size once it came, and the engine reports what it serves (engine.Observe)
// itself.
func (p *Proxy) observe(key string, reads, writes uint32, n int) {
	if o := p.cfg.Observer; o != nil {
		o.Observe(p.cfg.Policy, key, reads, writes, uint32(n))
	}
}

// observeSent reports a command c sent raw (n bytes) if it writes: a read
// is reported once its reply came (classified.readKey).
func (p *Proxy) observeSent(c *classified, n int) {
	if c.observeWrite {
		p.observe(string(c.key), 0, 1, n)
	}
}
