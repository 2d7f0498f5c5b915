package proxy

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/heatsink-dev/heatsink/dataplane/engine"
	"github.com/heatsink-dev/heatsink/dataplane/resp"
	"github.com/heatsink-dev/heatsink/routing/command"
)

// mitigated serves a command that names at least one mitigated key
// through the engine, or refuses it with an error reply, as its
// classification says (handled); false leaves it to be forwarded raw
// (c.decision is engine.OpRaw, or the command is malformed for the engine:
// Redis gives its own error).
func (s *session) mitigated(c *classified, args [][]byte) (handled bool) {
	if c.decision.Op == engine.OpRaw {
		return false
	}
	// Every reply owed comes first (execEngine drains too): a SELECT among
	// them that Redis refused has moved the session back to a database
	// the table may not govern.
	s.drain()
	if !s.p.tableDB(s.db) {
		*c = s.p.classify(args, s.mode())
		return false
	}
	return s.execEngine(c.decision, args)
}

// invalidates lists the mitigated keys of a command sent raw that may
// write: the engine drops their cached copies once Redis has applied it
// (not before, or a concurrent read could cache the old value again).
func invalidates(e *engine.Engine, args [][]byte, d engine.Decision) (keys []string) {
	e.Invalidates(args, d, func(k string) { keys = append(keys, k) })
	return keys
}

// execEngine serves a command the engine handles (d.Op other than OpRaw)
// with engine.Serve, the implementation the go-redis hook uses too, after
// every reply owed before it, and appends its reply. It reports false when
// the command is to be forwarded raw after all (malformed: Redis gives its
// own error and writes nothing).
func (s *session) execEngine(d engine.Decision, args [][]byte) bool {
	s.drain()
	ctx, cancel := s.engineCtx()
	defer cancel()
	var obs engine.Observe
	if s.p.cfg.Observer != nil {
		obs = s.p.observe
	}
	if d.Op == engine.OpRead {
		s.execRead(ctx, args)
		return true
	}
	r, ok := s.p.cfg.Engine.Serve(ctx, d, args, s.raw, obs)
	if !ok {
		return false
	}
	if !s.quiet {
		s.cw.Buf = appendReply(s.cw.Buf, r, s.proto)
	}
	if d.Op == engine.OpRefuse {
		s.nLocal++
		s.p.observeRefused(d)
	} else {
		s.nEng++
		var err error
		if r.Kind == engine.ReplyError {
			err = r.Err
		}
		if d.Entry != nil {
			s.p.observeMoved(d.Entry.Key, writesNothing(args), err)
		}
	}
	return true
}

// execRead answers a cacheable read (engine.OpRead) with Redis' reply
// bytes in the client's protocol, from the engine's cache, coalesced, or
// read from a replica.
func (s *session) execRead(ctx context.Context, args [][]byte) {
	b, err := s.p.cfg.Engine.Read(ctx, args, s.proto)
	if s.p.cfg.Observer != nil {
		c, _ := command.Lookup(args[0])
		k := string(c.FirstKey(args))
		s.p.observe(k, 1, 0, len(b))
		s.p.observeMoved(k, true, err)
	}
	if !s.quiet {
		if err != nil {
			s.cw.Buf = appendEngineError(s.cw.Buf, err)
		} else {
			s.cw.Buf = append(s.cw.Buf, b...)
		}
	}
	s.nEng++
}

// engineCtx bounds one engine call by the proxy's reply timeout, if any.
func (s *session) engineCtx() (context.Context, context.CancelFunc) {
	if s.p.cfg.Timeout > 0 {
		return context.WithTimeout(context.Background(), s.p.cfg.Timeout)
	}
	return context.WithCancel(context.Background())
}

// raw is the engine's engine.Raw on the session's own path: the plain keys'
// commands of a multi-key command, each to its key's node.
func (s *session) raw(_ context.Context, cmds [][][]byte) []engine.Reply {
	enc := make([][]byte, len(cmds))
	keys := make([][]byte, len(cmds))
	for i, c := range cmds {
		enc[i] = resp.AppendArgs(nil, c)
		keys[i] = c[1]
	}
	replies := s.roundTrip(enc, keys)
	out := make([]engine.Reply, len(replies))
	for i := range replies {
		out[i] = replyOf(replies[i].Raw)
	}
	return out
}

// replyOf decodes a reply Redis sent into the engine's terms.
func replyOf(raw []byte) engine.Reply {
	v, _, err := resp.Decode(raw, resp.Limits{})
	if err != nil {
		return engine.Reply{Kind: engine.ReplyError, Err: errors.New(errUnreadable)}
	}
	switch v := v.(type) {
	case nil:
		return engine.Reply{Kind: engine.ReplyNil}
	case []byte:
		return engine.Reply{Kind: engine.ReplyBulk, Bulk: v}
	case string:
		return engine.Reply{Kind: engine.ReplyStatus, Str: v}
	case int64:
		return engine.Reply{Kind: engine.ReplyInt, Int: v}
	case resp.Error:
		return engine.Reply{Kind: engine.ReplyError, Err: v}
	}
	return engine.Reply{Kind: engine.ReplyError, Err: errors.New(errUnreadable)}
}

// appendReply renders an engine reply in the client's protocol.
func appendReply(b []byte, r engine.Reply, proto int) []byte {
	switch r.Kind {
	case engine.ReplyStatus:
		return resp.AppendStatus(b, r.Str)
	case engine.ReplyError:
		return appendEngineError(b, r.Err)
	case engine.ReplyInt:
		return resp.AppendInt(b, r.Int)
	case engine.ReplyBulk:
		return resp.AppendBulk(b, r.Bulk)
	case engine.ReplyDouble:
		if proto == 3 {
			b = append(b, ',')
			b = append(b, r.Bulk...)
			return append(b, '\r', '\n')
		}
		return resp.AppendBulk(b, r.Bulk)
	case engine.ReplyScored:
		if proto == 3 { // [member, score] pairs, as Redis sends WITHSCORES
			b = resp.AppendArrayHeader(b, len(r.Elems)/2)
			for i := 0; i+1 < len(r.Elems); i += 2 {
				b = resp.AppendArrayHeader(b, 2)
				b = appendReply(b, r.Elems[i], proto)
				b = appendReply(b, r.Elems[i+1], proto)
			}
			return b
		}
		b = resp.AppendArrayHeader(b, len(r.Elems))
		for _, el := range r.Elems {
			b = appendReply(b, el, proto)
		}
		return b
	case engine.ReplyArray, engine.ReplyMap, engine.ReplySet:
		switch {
		case r.Kind == engine.ReplyMap:
			b = appendMapHeader(b, len(r.Elems)/2, proto)
		case r.Kind == engine.ReplySet && proto == 3:
			b = append(b, '~')
			b = strconv.AppendInt(b, int64(len(r.Elems)), 10)
			b = append(b, '\r', '\n')
		default:
			b = resp.AppendArrayHeader(b, len(r.Elems))
		}
		for _, el := range r.Elems {
			b = appendReply(b, el, proto)
		}
		return b
	}
	return resp.AppendNull(b, proto)
}

// roundTrip sends raw commands (cmds[i] on keys[i]'s node) on the
// session's own upstream path after every reply owed before them, and
// returns their replies, copied, in order. RESP3 pushes that arrive with
// them go on to the client.
func (s *session) roundTrip(cmds, keys [][]byte) []resp.Reply {
	s.drain()
	quiet, holding := s.quiet, s.holding
	s.quiet, s.holding = false, true // these replies are read back, not sent
	defer func() { s.quiet, s.holding = quiet, holding }()
	if len(cmds) == 0 {
		return nil
	}
	mark := len(s.cw.Buf)
	for i, c := range cmds {
		node := 0
		switch {
		case s.roundTripTo != nil:
			node = s.roundTripTo[i]
		case s.p.cfg.Cluster:
			node = s.p.topo.nodeOf(slotOf(keys[i]))
		}
		s.forward(node, c, false, "")
	}
	s.drain()
	got := append([]byte(nil), s.cw.Buf[mark:]...)
	s.cw.Buf = s.cw.Buf[:mark]
	r := resp.NewReader(bytes.NewReader(got), len(got), resp.DefaultLimits())
	out := make([]resp.Reply, 0, len(cmds))
	for len(out) < len(cmds) {
		var rep resp.Reply
		if err := r.ReadReply(&rep); err != nil {
			// Cannot happen: these bytes were parsed once already.
			line := errUnreadable
			rep = resp.Reply{Type: '-', Line: []byte(line), Raw: resp.AppendError(nil, line)}
		}
		if rep.IsPush() {
			s.cw.Write(rep.Raw)
			continue
		}
		rep.Raw = append([]byte(nil), rep.Raw...)
		rep.Line = append([]byte(nil), rep.Line...)
		out = append(out, rep)
	}
	return out
}

// appendEngineError turns an engine error into an error reply, keeping a
// Redis error's own code.
func appendEngineError(b []byte, err error) []byte {
	msg := err.Error()
	if len(msg) > 0 && (msg[0] < 'A' || msg[0] > 'Z') {
		msg = "ERR " + msg
	}
	return resp.AppendError(b, msg)
}

// shedTimer times the reply of a command sent raw on a shed key, for the
// key's limiter (engine.ShedLatency): it admits less while its shard
// queues. The zero shedTimer times nothing.
type shedTimer struct {
	key   string
	at    time.Time
	write bool
}

// startShedTimer starts timing the command of decision d if it names a
// shed key (engine.ShedTimed) and mitigated says it names a mitigated key.
func startShedTimer(mitigated bool, d engine.Decision) shedTimer {
	if !mitigated {
		return shedTimer{}
	}
	if k := engine.ShedTimed(d); k != "" {
		return shedTimer{key: k, at: time.Now(), write: d.Write}
	}
	return shedTimer{}
}

// done hands the wait so far to the limiter.
func (t shedTimer) done(e *engine.Engine) {
	if t.key != "" {
		e.ShedLatency(t.key, t.write, time.Since(t.at))
	}
}
